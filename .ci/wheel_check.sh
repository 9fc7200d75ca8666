#!/usr/bin/env bash
# Install check (issue 16): posjax works as a plain, non-editable install, away from the checkout.
#
#   1. build the wheel (pip wheel . --no-deps) and install it into a FRESH venv with
#      requirements.txt only (posjax's pinned runtime dependencies; no torch, no transformers);
#   2. make a tiny random Hugging Face BERT (config.json, model.safetensors, vocab.txt) with the
#      calling python, which must have transformers + torch (requirements-hf.txt);
#   3. from a directory OUTSIDE the checkout, with the fresh venv:
#        python -m posjax.convert --hf BERT --out WORKDIR
#        posjax list schemes (the console script), python -m posjax list configs (absent here)
#        posjax.pretrained.load(WORKDIR), tokenize + encode
#        a tiny training continued from the converted workdir with the package API
#        (posjax.training.train_and_evaluate; train.py is a repository script, not in the wheel)
#      and check that posjax came from the venv, not from the checkout.
#
# Usage (repository root, a python with requirements-hf.txt active):  bash .ci/wheel_check.sh
# Env: KEEP=1 keeps the scratch directory and prints its path.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/posjax_wheel_check.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then echo "scratch: $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi
start=$SECONDS

echo "wheel_check [$((SECONDS - start)) s]: building the wheel"
"$PY" -m pip wheel "$REPO" --no-deps -q -w "$WORK/dist"
WHEEL=$(ls "$WORK"/dist/posjax-*.whl)

echo "wheel_check [$((SECONDS - start)) s]: tiny random HF BERT"
"$PY" - "$WORK/hf_bert" <<'EOF'
import os, sys
import torch
import transformers as T

out = sys.argv[1]
vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz") + [
    "the", "and", "of", "to", "in", "that", "he", "shall", "lord", "unto", "god", "his"]
torch.manual_seed(0)
config = T.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
T.BertForMaskedLM(config).save_pretrained(out)
with open(os.path.join(out, "vocab.txt"), "w") as f:
    f.write("\n".join(vocab) + "\n")
EOF

echo "wheel_check [$((SECONDS - start)) s]: fresh venv with requirements.txt + the wheel"
"$PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$VPY" -m pip install -q --upgrade pip
"$VPY" -m pip install -q -r "$REPO/requirements.txt"
"$VPY" -m pip install -q --no-deps "$WHEEL"

mkdir "$WORK/outside"
cd "$WORK/outside"
# Nothing from the checkout on the path: no PYTHONPATH, and the current directory is elsewhere.
unset PYTHONPATH
echo "wheel_check [$((SECONDS - start)) s]: python -m posjax.convert"
JAX_PLATFORMS=cpu "$VPY" -m posjax.convert --hf "$WORK/hf_bert" --out "$WORK/converted"

echo "wheel_check [$((SECONDS - start)) s]: posjax list (the console script)"
"$WORK/venv/bin/posjax" list schemes | grep -q "^rope  (hooks: rotate, rotate_values)"
JAX_PLATFORMS=cpu "$VPY" -m posjax list configs | grep -q "^no configs/ folder"

echo "wheel_check [$((SECONDS - start)) s]: pretrained.load + a tiny training"
JAX_PLATFORMS=cpu "$VPY" - "$WORK/converted" "$REPO" <<'EOF'
import importlib.util, os, sys

import posjax
from posjax import pretrained
from posjax.training import train_and_evaluate
from posjax.training.workdir import read_config

workdir, repo = sys.argv[1], sys.argv[2]
here = os.path.realpath(posjax.__file__)
assert not here.startswith(os.path.realpath(repo) + os.sep), f"posjax imported from the checkout: {here}"
assert importlib.util.find_spec("configs") is None, "the repository's configs/ is importable"

model = pretrained.load(workdir)
ids, mask = model.tokenize(["the lord god", "he shall go unto the land"])
hidden = model.encode(ids, mask)
assert hidden.shape[0] == 2 and hidden.shape[-1] == 32, hidden.shape

config = read_config(workdir)  # what train.py --config=configs/workdir.py:DIR reads
config.data.seq_len, config.data.batch_size, config.data.max_documents = 32, 2, 50
config.train.steps, config.train.log_every, config.train.eval_every = 2, 1, 0
config.train.checkpoint_every = 2
summary = train_and_evaluate(config, workdir, progress_bar=False)
assert summary["step"] == 2, summary
# The CPU attention kernel's source ships in the wheel and builds from there.
import shutil
from posjax.attention import native
assert os.path.exists(native.SOURCE), native.SOURCE
assert shutil.which("c++") is None or native.library_path() is not None, "kernel not built"
print(f"wheel_check: posjax {here}: converted, loaded, encoded {tuple(hidden.shape)}, "
      f"trained to step {summary['step']}")
EOF
echo "wheel_check: ok in $((SECONDS - start)) s"
