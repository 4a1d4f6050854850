"""Compile CUDA sources with NVRTC, on a machine with no GPU: the suite's check that every kernel builds.

NVRTC (`pip install -e ".[kernels]"`: nvidia-cuda-nvrtc-cu12, driven through
cuda-bindings 12.x) needs no device. `compile_cuda` returns NVRTC's log when
compilation fails, so a test shows the compiler's own message; `registers`
reads ptxas's report of each kernel's registers per thread, so a test can
check that a block of its threads fits a multiprocessor (65,536 registers).
`ARCHES` are the GPUs CI builds for.
"""
import re

import pytest

ARCHES = ("sm_80", "sm_90")
REGISTERS_PER_BLOCK = 65536  # the most one thread block may use, on sm_80 and sm_90 alike


def _compile(source, arch, name, options=()):
    """(True when it compiled, NVRTC's log) for `source` built for `arch`."""
    lib = pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC is not installed: pip install -e \".[kernels]\"")
    err, program = lib.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    assert err == lib.nvrtcResult.NVRTC_SUCCESS, err
    try:
        flags = [f"--gpu-architecture={arch}".encode(), b"--std=c++14", *(o.encode() for o in options)]
        (err,) = lib.nvrtcCompileProgram(program, len(flags), flags)
        _, size = lib.nvrtcGetProgramLogSize(program)
        log = bytearray(size)  # NVRTC writes into it: never a bytes object (b" " * 1 is CPython's shared b" ")
        lib.nvrtcGetProgramLog(program, log)
        return err == lib.nvrtcResult.NVRTC_SUCCESS, log.rstrip(b"\0").decode(errors="replace")
    finally:
        lib.nvrtcDestroyProgram(program)


def compile_cuda(source, arch, name="kernels.cu"):
    """Compile `source` to a cubin for `arch`; None when it compiles, else NVRTC's log (errors and warnings)."""
    ok, log = _compile(source, arch, name)
    return None if ok else log


def registers(source, arch, name="kernels.cu"):
    """{kernel name: registers per thread} as ptxas reports them for `arch` (the source must compile)."""
    ok, log = _compile(source, arch, name, ("-Xptxas=-v",))
    assert ok, log
    found = re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", log, flags=re.S)
    return {kernel: int(count) for kernel, count in found}
