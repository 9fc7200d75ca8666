#!/usr/bin/env bash
# Run HERE, on a machine with pip and the package index, before a GPU session: downloads into
# .whl/ (git-ignored) the pure-Python packages posjax needs that the device image lacks, at the
# versions requirements.txt pins. bench/device.sh installs them there; the device tool's `run`
# must carry the folder (carry: [".whl"]).
#
# The device image has jax, flax, optax, orbax, torch and transformers of its own (the GPU
# builds), but not ml_collections, which every config file imports. The data pipeline's
# packages (grain, tensorflow-datasets, the corpora) are not needed: the device benches use
# synthetic batches.
set -eu
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"
pins=$(grep -iE '^ml[_-]collections==' requirements.txt)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 -d .whl $pins
ls -l .whl
