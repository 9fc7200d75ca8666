r"""The tables of a finished evaluation against another baseline, without scoring anything again.

    python -m posjax.evaluation.report.rebaseline results/minilm hierarchical

Reads OUT/results.json (its per-row sums), computes every cell's paired difference from METHOD
(the same rows and masks; the bootstrap of posjax.evaluation.stats.intervals with the run's
seed) and writes OUT/results_vs_<METHOD>.md. results.json and results.md are left as they are.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

from posjax.errors import ConfigError
from posjax.evaluation import derive
from posjax.evaluation.report import report
from posjax.evaluation.results import results_file


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="a folder holding eval.py's results.json")
    p.add_argument("method", help="the method to subtract, e.g. hierarchical or tile")
    args = p.parse_args(argv)
    try:
        try:
            results = results_file.load(args.out)
        except results_file.ResultsFileError as e:
            raise ConfigError("out", args.out, f"a folder holding eval.py's results.json ({e})")
        methods = {c["method"] for c in results["cells"].values()}
        if args.method not in methods:
            raise ConfigError("method", args.method, f"one of {sorted(m for m in methods if m)}")
    except ConfigError as e:
        print(f"rebaseline: error: {e}", file=sys.stderr)
        return 2
    results = copy.deepcopy(results)
    derive.derive(results, args.method)
    results["settings"]["baseline"] = args.method
    target = os.path.join(args.out, f"results_vs_{args.method}.md")
    report.atomic_write(target, report.to_markdown(results))
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
