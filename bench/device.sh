#!/usr/bin/env bash
# One GPU session of the Pallas kernels: correctness on the device, then speed and memory.
# Runs in well under 8 minutes on an H200 and needs no network:
#   bench/kernels.py checks every fused scheme against the reference (values + gradients),
#   then times kernel / cuDNN / XLA / chunked under a 330 s budget (later cases print
#   'skipped (budget)'), with a 90 s watchdog per case and a hard 470 s limit here.
# Usage (repository root):  bash bench/device.sh [extra bench/kernels.py flags]
# Output: markdown tables on stdout (and bench/kernels_gpu.md, or $OUT/kernels_gpu.md when the
# device runner provides $OUT) to paste into bench/RESULTS.md '## Kernels'.
set -u
cd "$(dirname "$0")/.."
PY=python3
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.9
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
"$PY" -c "import jax; print('jax', jax.__version__, jax.default_backend(), jax.devices())" || exit 2
LOG="${OUT:-bench}/kernels_gpu.md"
timeout -k 10 470 "$PY" -m bench.kernels --budget 330 --case_timeout 90 "$@" 2>&1 | tee "$LOG"
status=${PIPESTATUS[0]}
echo "bench/kernels.py exit status: $status (124 = hit the 470 s limit; 3 = watchdog)"
exit "$status"
