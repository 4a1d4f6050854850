"""The fused CUDA kernels, checked as far as a machine without a GPU can.

Their sources must compile as CUDA for float and double (with nvcc, when the
machine has it, wrapped the way CuPy's ElementwiseKernel wraps them), and
the CPU must never reach them. Their numbers are checked against the CPU in
tests/test_devices.py under --device cuda.
"""
import shutil
import subprocess

import numpy as np
import pytest

from autograd import backend
from autograd.cuda_kernels import KERNELS


def harness(name, inputs, outputs, body, dtype):
    """A __global__ function that gives every parameter a per-element variable, as ElementwiseKernel does."""
    ins = [p.split()[-1] for p in inputs.split(",")]
    outs = [p.split()[-1] for p in outputs.split(",")]
    args = ", ".join([f"const T* {n}_in" for n in ins] + [f"T* {n}_out" for n in outs] + ["int n"])
    loads = " ".join(f"const T {n} = {n}_in[i];" for n in ins)
    decls = " ".join(f"T {n};" for n in outs)
    stores = " ".join(f"{n}_out[i] = {n};" for n in outs)
    return (f"typedef {dtype} T;\n__global__ void {name}({args}) {{\n"
            f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"  if (i < n) {{ {loads} {decls}\n{body}\n {stores} }}\n}}\n")


@pytest.mark.cpu_only("compiles the sources with nvcc instead of running them")
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA compiler) is not installed")
@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("dtype", ["float", "double"])
def test_kernel_sources_compile_as_cuda(tmp_path, name, dtype):
    source = tmp_path / f"{name}.cu"
    source.write_text(harness(name, *KERNELS[name], dtype))
    result = subprocess.run(["nvcc", "-c", "-arch=sm_80", "-o", str(tmp_path / "k.o"), str(source)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_the_cpu_never_reaches_a_kernel():
    assert backend.fused("gelu_forward", np.ones(3, dtype=np.float32)) is None


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_cupy_accepts_the_kernel_definitions(name):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    inputs, outputs, body = KERNELS[name]
    kernel = cupy.ElementwiseKernel(inputs, outputs, body, f"autograd_{name}")  # parses; compiles at first call
    assert (kernel.nin, kernel.nout) == (len(inputs.split(",")), len(outputs.split(",")))
