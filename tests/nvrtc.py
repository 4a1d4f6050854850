"""Compile CUDA sources with NVRTC, on a machine with no GPU: the suite's check that every kernel builds.

NVRTC (`pip install -e ".[kernels]"`: nvidia-cuda-nvrtc-cu12, driven through
cuda-bindings 12.x) needs no device. `compile_cuda` returns NVRTC's log when
compilation fails, so a test shows the compiler's own message; `registers`
reads ptxas's report of each kernel's registers per thread, so a test can
check that a block of its threads fits a multiprocessor (65,536 registers),
and `static_shared_memory` its bytes of static shared memory.
`ARCHES` are the GPUs CI builds for.
"""
import re

import pytest

ARCHES = ("sm_80", "sm_90")
REGISTERS_PER_BLOCK = 65536  # the most one thread block may use, on sm_80 and sm_90 alike


def _compile(source, arch, name, options=(), name_expressions=()):
    """(True when it compiled and every name expression was instantiated, NVRTC's log) for `source` on `arch`."""
    lib = pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC is not installed: pip install -e \".[kernels]\"")
    err, program = lib.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    assert err == lib.nvrtcResult.NVRTC_SUCCESS, err
    try:
        for expression in name_expressions:  # templated kernels, named as CuPy's RawModule asks for them
            (err,) = lib.nvrtcAddNameExpression(program, expression.encode())
            assert err == lib.nvrtcResult.NVRTC_SUCCESS, err
        flags = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in options)]
        (err,) = lib.nvrtcCompileProgram(program, len(flags), flags)
        _, size = lib.nvrtcGetProgramLogSize(program)
        log = bytearray(size)  # NVRTC writes into it: never a bytes object (b" " * 1 is CPython's shared b" ")
        lib.nvrtcGetProgramLog(program, log)
        log = log.rstrip(b"\0").decode(errors="replace")
        if err != lib.nvrtcResult.NVRTC_SUCCESS:
            return False, log
        missing = [e for e in name_expressions if not lib.nvrtcGetLoweredName(program, e.encode())[1]]
        return not missing, log + "".join(f"\n{e} was not instantiated" for e in missing)
    finally:
        lib.nvrtcDestroyProgram(program)


def compile_cuda(source, arch, name="kernels.cu", name_expressions=(), options=("--std=c++14",)):
    """Compile `source` to a cubin for `arch`; None when it compiles, else NVRTC's log (errors and warnings).

    `name_expressions` are templated kernels that must be instantiated (`k<float>`); `options=()` compiles with
    NVRTC's default C++ standard, as CuPy's RawModule leaves it.
    """
    ok, log = _compile(source, arch, name, options, name_expressions)
    return None if ok else log


def registers(source, arch, name="kernels.cu"):
    """{kernel name: registers per thread} as ptxas reports them for `arch` (the source must compile)."""
    return {kernel: int(count) for kernel, count, _ in _ptxas_report(source, arch, name)}


def static_shared_memory(source, arch, name="kernels.cu"):
    """{kernel name: bytes of static shared memory per block} as ptxas reports them for `arch`."""
    return {kernel: int(smem or 0) for kernel, _, smem in _ptxas_report(source, arch, name)}


def _ptxas_report(source, arch, name):
    """(kernel, registers, static shared bytes or None) per kernel of `source`, from ptxas's -v report."""
    ok, log = _compile(source, arch, name, ("--std=c++14", "-Xptxas=-v"))
    assert ok, log
    return re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers(?:[^\n]*?(\d+) bytes smem)?", log,
                      flags=re.S)
