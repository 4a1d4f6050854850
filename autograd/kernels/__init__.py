"""The kernels' wing: fused fast paths of ops, for the CPU and the GPU, each beside what checks it.

    fused(name, array)  what an op asks for: the kernel `name` for `array`'s device, or None (compose the op)
    runtime.py          the CPU kernels' machinery: the thread pool (fair under load), NumPy's OpenBLAS shared
                        with it, numba's compilations (a Ctrl-C held, LLVM's pages handed back)
    cpu.py              numba's kernels; their reference is the composed op itself (AUTOGRAD_FUSED=0)
    cuda.py             the CUDA sources and their launchers, for CuPy
    cuda_twins.py       each raw CUDA kernel's order of work in NumPy, so a machine without a GPU checks it

A kernel computes exactly the formula its op states (autograd/ops.py has the
Jacobians, nn/optim.py AdamW's update): it is a fast path of its op, never a
second definition, and AUTOGRAD_FUSED=0 switches every one off. Importing
autograd loads none of them: numba is imported with the first CPU kernel an op
asks for, the CUDA sources with the first GPU one.
"""
import functools

import numpy

from .. import backend, switches

_cuda_kernels = {}  # CuPy's compiled kernels, by name (elementwise) or name expression (raw)
_cpu = {"kernels": None, "threads": None}  # cpu.py once loaded (False without numba); a thread count set
_CPU_SMALLEST = 1024  # no kernel takes fewer elements (cpu.LAUNCHERS): below, numba is not even loaded


def fused(name, array):
    """The fused kernel `name` for `array`: CUDA (cuda.py) on a GPU, numba's (cpu.py) on the CPU.

    None with AUTOGRAD_FUSED=0, on the CPU for arrays that are not
    float32, smaller than the kernel pays for, or when numba is not
    installed, and on a GPU for arrays that are empty or not floating
    point: the op then composes the same formula from array-module
    calls. An elementwise GPU kernel comes back as CuPy's ElementwiseKernel;
    a raw one as its launcher with the kernels compiled for `array`'s dtype
    (cuda.LAUNCHERS); a CPU kernel as its launcher, which takes the
    same arguments.
    """
    if switches.read("AUTOGRAD_FUSED") == "0":
        return None
    device = backend.device_of(array)
    if device == "cpu":
        return _cpu_kernel(name, array)
    if device != "cuda":
        return None
    if not array.size or array.dtype.kind != "f":
        # CUDA refuses a launch of no blocks, which an empty array's rows would ask for; and every kernel computes
        # in floats (an integer T does not compile), where the composed op names the fix for integer data
        return None
    from . import cuda
    cupy = backend.xp_for("cuda")
    if name in cuda.ELEMENTWISE:
        if name not in _cuda_kernels:
            inputs, outputs, body = cuda.ELEMENTWISE[name]
            _cuda_kernels[name] = cupy.ElementwiseKernel(inputs, outputs, body, f"autograd_{name}")
        return _cuda_kernels[name]
    if array.dtype not in (numpy.float32, numpy.float64) or name not in cuda.LAUNCHERS:
        return None  # the raw kernels' two instantiations; a CPU-only kernel (matmul: cuBLAS has the GPU's)
    launcher, names = cuda.LAUNCHERS[name]
    return functools.partial(launcher, *[_raw_kernel(k, array.dtype) for k in names])


def _cpu_kernel(name, array):
    if array.dtype != numpy.float32 or array.size < _CPU_SMALLEST:
        return None
    if _cpu["kernels"] is None:
        try:
            from . import cpu
        except ImportError:  # numba is not installed, or NUMBA_DISABLE_JIT=1: every op keeps its NumPy path
            _cpu["kernels"] = False
            return None
        if _cpu["threads"]:  # an MPI rank's share, given before the kernels loaded (they set the default)
            cpu.runtime.set_threads(_cpu["threads"])
        _cpu["kernels"] = cpu
    if not _cpu["kernels"]:
        return None
    launcher, smallest = _cpu["kernels"].LAUNCHERS.get(name, (None, 0))
    return launcher if launcher is not None and array.size >= smallest else None


def share_cpu_threads(n):
    """Run the CPU kernels on `n` threads (nn.distributed gives each MPI rank its share of the cores); None: the
    kernels' own default again (OMP_NUM_THREADS, else every core)."""
    _cpu["threads"] = n
    if _cpu["kernels"]:
        runtime = _cpu["kernels"].runtime
        runtime.set_threads(n or runtime.threads())


def _raw_kernel(name, dtype):
    """Raw kernel `name` compiled (once) for float32 or float64 arrays: CuPy's RawModule with a name expression."""
    from . import cuda
    expression = cuda.name_expression(name, dtype)
    if expression not in _cuda_kernels:
        module = backend.xp_for("cuda").RawModule(code=cuda.source(name), name_expressions=[expression])
        _cuda_kernels[expression] = module.get_function(expression)
    return _cuda_kernels[expression]
