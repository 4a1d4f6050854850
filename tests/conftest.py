"""The suite's device switch (`python -m pytest --device cuda` runs the device-aware tests on the GPU) and its
number of workers.

Device-aware tests take the `device` fixture and compare what they compute
there with the same computation on the CPU. On the CPU itself that comparison
is empty, so those tests say so and skip; a test that cannot run on CUDA is
marked `cpu_only` and skips, with its reason, under --device cuda.
"""
import contextlib
import os
import signal
import threading

import pytest

from autograd import backend

MOST_WORKERS = 4  # the longest files (the kernel compiles, the checkpoint crashes) bound the run beyond that


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per core this process may run on (its affinity, not the machine's count), at most
    MOST_WORKERS; none on one core, where a worker would only add its start-up. PYTEST_XDIST_AUTO_NUM_WORKERS,
    when set, is left to pytest-xdist's own rule."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return 0 if cores == 1 else min(cores, MOST_WORKERS)


def pytest_addoption(parser):
    parser.addoption("--device", choices=list(backend.DEVICES), default="cpu",
                     help="run the device-aware tests (tests/test_devices.py) on this device")


def pytest_configure(config):
    # The Ctrl-C tests send SIGINT as a terminal does, to processes that must meet it at its default. A shell
    # script's background job (`python -m pytest &`) starts with SIGINT ignored, and every process started from
    # it inherits that, so those tests found no Ctrl-C: the suite restores the default for itself and its children.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line("markers", "cpu_only(reason): meaningful on the CPU only; skipped under --device cuda")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--device") == "cpu":
        return
    for item in items:
        marker = item.get_closest_marker("cpu_only")
        if marker is not None:
            item.add_marker(pytest.mark.skip(reason=f"cpu_only: {marker.args[0] if marker.args else ''}"))


@pytest.fixture
def device(request):
    """The device under test; on the CPU there is nothing to compare against, so the test skips."""
    name = request.config.getoption("--device")
    if name == "cpu":
        pytest.skip("cross-device check: run `python -m pytest --device cuda` on a machine with a GPU")
    backend.xp_for(name)  # a clear error naming CuPy when the device is missing
    return name


@pytest.fixture
def piped(tmp_path):
    """`path, received = piped(name)`: a named pipe `name` in tmp_path with a reader on it; after the write,
    received() is every byte the reader got (b"" if nothing opened the pipe to write)."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("makes a named pipe")

    def make(name):
        path = tmp_path / name
        os.mkfifo(path)
        got = []
        reader = threading.Thread(target=lambda: got.append(path.read_bytes()), daemon=True)
        reader.start()

        def received():
            reader.join(timeout=10)
            if reader.is_alive():  # still waiting for a writer to open the pipe: open it, so that the read ends
                with contextlib.suppress(OSError):  # (ENXIO: the reader went meanwhile)
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                reader.join(timeout=10)
            return got[0] if got else b""
        return path, received
    return make
