"""Benchmark scripts, run from the repository root as modules: `python -m bench.NAME [flags]`
(so `posjax` and `bench.*` import without any sys.path edits). What each measures and
the latest numbers: bench/README.md."""
