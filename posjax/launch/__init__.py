"""Launchers for clusters (no jax imports: they run on the machine that starts the job)."""
