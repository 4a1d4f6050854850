"""The fused CUDA kernels, checked as far as a machine without a GPU can.

Every source compiles with NVRTC (the pip packages nvidia-cuda-nvrtc-cu12
and cuda-bindings, the extra ".[kernels]") for sm_80 and sm_90, as float and
double: the raw kernels as CuPy's RawModule compiles them (no extra options,
the same name expressions), the elementwise ones wrapped the way CuPy's
ElementwiseKernel wraps them. A compile error fails with NVRTC's log.
The tests skip only when those packages are absent. The CPU never reaches a
CUDA kernel (it has numba's twins, test_cpu_kernels.py); their algorithms
are checked by the NumPy twins (autograd/kernels/cuda_twins.py, test_kernel_twins.py) and their numbers
against the CPU under --device cuda (tests/test_devices.py).
"""
import numpy as np
import pytest

from autograd import kernels
from autograd.kernels import cuda
from tests.nvrtc import ARCHES, compile_cuda

CUPY = {"options": ()}  # as CuPy compiles: NVRTC's default C++ standard, no extra options

C_TYPES = {"float64": "double", "float32": "float", "int64": "long long", "int32": "int"}  # CuPy's names → C's


def elementwise_harness(name, inputs, outputs, body, dtype):
    """A __global__ function that gives every parameter a per-element variable of its declared type (T, or a
    fixed one: `float64 beta1` is a double), as ElementwiseKernel does (a `raw` parameter stays a pointer)."""
    def parts(params):
        return [(C_TYPES.get(p.split()[-2], p.split()[-2]), p.split()[-1], p.split()[0] == "raw")
                for p in params.split(",")]
    args, loads = [], []
    for ctype, var, raw in parts(inputs):
        if raw:
            args.append(f"const {ctype}* {var}")
        else:
            args.append(f"const {ctype}* {var}_in")
            loads.append(f"const {ctype} {var} = {var}_in[i];")
    outs = parts(outputs)
    args += [f"{ctype}* {var}_out" for ctype, var, _ in outs] + ["int n"]
    decls = " ".join(f"{ctype} {var} = {var}_out[i];" for ctype, var, _ in outs)
    stores = " ".join(f"{var}_out[i] = {var};" for _, var, _ in outs)
    return (f"typedef {dtype} T;\nextern \"C\" __global__ void {name}({', '.join(args)}) {{\n"
            f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"  if (i < n) {{ {' '.join(loads)} {decls}\n{body}\n {stores} }}\n}}\n")


def test_the_harness_declares_each_parameter_as_its_type():
    """ADAMW takes its betas as float64 whatever T is; the harness wrote every parameter as T, so the compile
    test built a kernel other than the one CuPy builds."""
    source = elementwise_harness("adamw", *cuda.ADAMW, "float")
    assert "const double* beta1_in" in source and "const double beta2 = beta2_in[i];" in source
    assert "const T* g_in" in source and "T* w_out" in source


@pytest.mark.cpu_only("compiles the sources with NVRTC instead of running them")
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("name", sorted(cuda.RAW))
def test_raw_kernels_compile_for_float_and_double(name, arch):
    expressions = [cuda.name_expression(name, dtype) for dtype in (np.float32, np.float64)]
    assert compile_cuda(cuda.source(name), arch, name_expressions=expressions, **CUPY) is None


@pytest.mark.cpu_only("compiles the sources with NVRTC instead of running them")
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", ["float", "double"])
@pytest.mark.parametrize("name", sorted(cuda.ELEMENTWISE))
def test_elementwise_kernels_compile(name, dtype, arch):
    assert compile_cuda(elementwise_harness(name, *cuda.ELEMENTWISE[name], dtype), arch, **CUPY) is None


@pytest.mark.cpu_only("compiles a broken source with NVRTC")
def test_a_compile_error_fails_with_nvrtcs_log():
    broken = cuda.PRELUDE + "template <typename T> __global__ void k(T* x) { x[0] = undeclared; }"
    log = compile_cuda(broken, "sm_90", name_expressions=["k<float>"], **CUPY)
    assert log is not None and "undeclared" in log


def test_every_raw_kernel_has_a_launcher_and_every_launcher_names_raw_kernels():
    used = {k for _, names in cuda.LAUNCHERS.values() for k in names}
    assert used == set(cuda.RAW)
    for name, source in cuda.RAW.items():
        assert f"__global__ void {name}(" in source


def test_kernels_take_float32_and_float64_only():
    assert cuda.name_expression("clip_scale", np.float32) == "clip_scale<float>"
    with pytest.raises(TypeError, match="clip_scale: the CUDA kernel takes float32 or float64 arrays, got float16"):
        cuda.name_expression("clip_scale", np.float16)


def test_the_cpu_never_reaches_a_cuda_kernel():
    x = np.ones((256, 256), dtype=np.float32)
    for name in (*cuda.ELEMENTWISE, *cuda.LAUNCHERS):
        kernel = kernels.fused(name, x)
        assert kernel is None or kernel.__module__ == "autograd.kernels.cpu"  # numba's twin, or the composed op


@pytest.mark.parametrize("name", sorted(cuda.ELEMENTWISE))
def test_cupy_accepts_the_elementwise_definitions(name):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    inputs, outputs, body = cuda.ELEMENTWISE[name]
    kernel = cupy.ElementwiseKernel(inputs, outputs, body, f"autograd_{name}")  # parses; compiles at first call
    assert (kernel.nin, kernel.nout) == (len(inputs.split(",")), len(outputs.split(",")))
