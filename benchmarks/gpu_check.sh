#!/usr/bin/env bash
# The device check, for a lent GPU machine (CuPy and PyTorch for CUDA installed there), in under 10 minutes:
# the device-aware tests on "cuda" (the decode path's graph, eager kernels and CPU tokens among them), then the GPU
# benchmark (training step, generation, fused kernels). Run from the repository root:
#     bash benchmarks/gpu_check.sh
# Everything it prints also lands in ${OUT:-.}/gpu_check.log.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
log="${OUT:-.}/gpu_check.log"
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    python3 -c "import cupy, torch; print('cupy', cupy.__version__, '| torch', torch.__version__)"
    echo "== tests on cuda =="
    timeout 240 python3 -m pytest --device cuda -q -p no:cacheprovider tests/test_devices.py tests/autograd tests/nn \
        tests/models/test_decode.py
    echo "pytest exit: $?"
    echo "== benchmark =="
    timeout 300 python3 -m benchmarks.gpu --steps 5 --rounds 1
    echo "benchmark exit: $?"
} 2>&1 | tee "$log"
