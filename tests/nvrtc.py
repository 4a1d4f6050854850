"""Compile CUDA sources with NVRTC, on a machine with no GPU: the suite's check that every kernel builds.

NVRTC (pip: nvidia-cuda-nvrtc-cu12, driven through cuda-bindings 12.x) needs
no device. `compile_cuda` returns NVRTC's log when compilation fails, so a
test can show the compiler's own message; `ARCHES` are the GPUs CI builds for.
"""
import pytest

ARCHES = ("sm_80", "sm_90")


def nvrtc():
    """cuda.bindings.nvrtc, or a skip naming the packages that provide it."""
    return pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC is not installed: pip install -e \".[kernels]\"")


def compile_cuda(source, arch, name="kernels.cu"):
    """Compile `source` to a cubin for `arch`; None when it compiles, else NVRTC's log (errors and warnings)."""
    lib = nvrtc()
    err, program = lib.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    assert err == lib.nvrtcResult.NVRTC_SUCCESS, err
    try:
        options = [f"--gpu-architecture={arch}".encode(), b"--std=c++14"]
        (err,) = lib.nvrtcCompileProgram(program, len(options), options)
        if err == lib.nvrtcResult.NVRTC_SUCCESS:
            return None
        _, size = lib.nvrtcGetProgramLogSize(program)
        log = b" " * size
        lib.nvrtcGetProgramLog(program, log)
        return log.decode(errors="replace")
    finally:
        lib.nvrtcDestroyProgram(program)
