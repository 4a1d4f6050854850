"""The suite's device switch: `python -m pytest --device cuda` runs the device-aware tests on the GPU.

Device-aware tests take the `device` fixture and compare what they compute
there with the same computation on the CPU. On the CPU itself that comparison
is empty, so those tests say so and skip; a test that cannot run on CUDA is
marked `cpu_only` and skips, with its reason, under --device cuda.
"""
import pytest

from autograd import backend


def pytest_addoption(parser):
    parser.addoption("--device", choices=list(backend.DEVICES), default="cpu",
                     help="run the device-aware tests (tests/test_devices.py) on this device")


def pytest_configure(config):
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
