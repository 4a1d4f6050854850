#!/usr/bin/env bash
# The device check, for a lent GPU machine (CuPy and PyTorch for CUDA installed there), in about 8 minutes:
# the device-aware tests on "cuda" (the CUDA kernels against their NumPy twins, the decode path's graph against its
# eager kernels and the CPU's tokens), then the GPU benchmark: GPT-2 small's training step against PyTorch CUDA
# eager, generation, each fused kernel against its composed op (values and time), and nanoGPT's Shakespeare-char
# GPU configuration against PyTorch eager. Run from the root:
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
    # in one process (-o addopts=""): the device machine need not have pytest-xdist installed
    timeout 220 python3 -m pytest --device cuda -q -p no:cacheprovider -o addopts="" tests/test_devices.py \
        tests/autograd tests/nn tests/models/test_decode.py
    echo "pytest exit: $?"
    echo "== benchmark =="
    timeout 270 python3 -m benchmarks.gpu --steps 5 --rounds 1 --new-tokens 64
    echo "benchmark exit: $?"
} 2>&1 | tee "$log"
