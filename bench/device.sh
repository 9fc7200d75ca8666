#!/usr/bin/env bash
# One GPU session: the Pallas kernels' correctness and speed, then BERT-base training against
# Hugging Face torch. About 9 minutes at most on an H200 (each part has a hard limit), no network.
#
#   kernels  bench/kernels.py: every fused scheme against the reference on the device (values +
#            gradients), then kernel / cuDNN / XLA / chunked timings under a 230 s budget (later
#            cases print 'skipped (budget)'), a 90 s watchdog per case, 290 s at most.
#   peer     bench/peer_throughput.py --device=cuda --shape=base: posjax's real train step against
#            transformers' BertForMaskedLM + AdamW, BERT-base (12 x 768, seq 512, batch 32), bf16
#            (posjax bf16 products with float32 accumulation, torch autocast), tokens/s, MFU
#            against the measured bf16 matmul peak, and the ratio; 240 s at most.
#
# Usage (repository root): bash bench/device.sh [all|kernels|peer] [extra bench/kernels.py flags]
# Before the session, here: bash bench/device_wheels.sh (the packages the device image lacks),
# then call the device tool's run with carry [".whl"] and the command `bash bench/device.sh`.
# Output: the tables on stdout, and kernels_gpu.md / peer_gpu.txt in $OUT (the device runner's
# folder that comes back) or bench/, to record in bench/README.md with the date and hardware.
set -u
cd "$(dirname "$0")/.."
part=${1:-all}
case "$part" in all|kernels|peer) shift || true ;; *) part=all ;; esac
PY=python3
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/posjax_site .whl/*.whl || exit 2
    export PYTHONPATH="/tmp/posjax_site${PYTHONPATH:+:$PYTHONPATH}"
fi
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.9
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
"$PY" -c "import jax; print('jax', jax.__version__, jax.default_backend(), jax.devices())" || exit 2
DIR="${OUT:-bench}"
status=0
if [ "$part" = all ] || [ "$part" = kernels ]; then
    timeout -k 10 290 "$PY" -m bench.kernels --budget 230 --case_timeout 90 "$@" 2>&1 \
        | tee "$DIR/kernels_gpu.md"
    s=${PIPESTATUS[0]}
    echo "bench/kernels.py exit status: $s (124 = hit the 290 s limit; 3 = watchdog)"
    [ "$s" = 0 ] || status=$s
fi
if [ "$part" = all ] || [ "$part" = peer ]; then
    "$PY" -c "import ml_collections, torch, transformers" || {
        echo "peer: a package is missing (ml_collections: bash bench/device_wheels.sh here, carry .whl)"
        exit 2
    }
    timeout -k 10 240 "$PY" -m bench.peer_throughput --device=cuda --shape=base \
        --dtypes=bfloat16 --rounds=2 --steps=5 2>&1 | tee "$DIR/peer_gpu.txt"
    s=${PIPESTATUS[0]}
    echo "bench/peer_throughput.py exit status: $s (124 = hit the 240 s limit)"
    [ "$s" = 0 ] || status=$s
fi
exit "$status"
