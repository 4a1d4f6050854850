"""glibc's allocator setting (autograd.keep_freed_memory) is made by a call: importing the engine leaves it alone,
creating an optimizer and the training and sampling commands make the call, and AUTOGRAD_KEEP_FREED_MEMORY
switches it on at import or off.

Each check runs in a fresh process and asks glibc (mallinfo2) whether a 16 MB array came from a fresh mmap(), as
glibc's first threshold (128 KB) has it, or from the heap, as the setting's 32 MB threshold has it.
"""
import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = 16 << 20

PROBE = """
import ctypes, sys
import numpy
class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = Mallinfo2
{before}
mapped = mallinfo2().hblkhd
block = numpy.empty({size}, dtype=numpy.uint8)
print(mallinfo2().hblkhd - mapped)
"""

pytestmark = pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"),
                                reason="mallinfo2 is glibc's (2.33 and later): nothing to observe elsewhere")


def mmapped_bytes(before, switch=None, size=BLOCK):
    """How many bytes of a `size`-byte array (16 MB) glibc served by mmap() in a fresh process, after `before`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("AUTOGRAD_KEEP_FREED_MEMORY", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                         "MALLOC_MMAP_MAX_")}
    if switch is not None:
        env["AUTOGRAD_KEEP_FREED_MEMORY"] = switch
    done = subprocess.run([sys.executable, "-c", PROBE.format(before=before, size=size)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def test_without_the_setting_glibc_maps_the_block_and_with_it_serves_it_from_the_heap():
    assert mmapped_bytes("") >= BLOCK  # the probe sees glibc's own behaviour
    assert mmapped_bytes("import autograd; assert autograd.keep_freed_memory() is True") == 0


def test_with_the_setting_a_block_above_32_mb_comes_from_the_heap_too():
    size = 200 << 20  # above glibc's largest mmap threshold: only M_MMAP_MAX = 0 keeps it off mmap()
    assert mmapped_bytes("", size=size) >= size
    assert mmapped_bytes("import autograd; assert autograd.keep_freed_memory() is True", size=size) == 0


def test_importing_the_engine_changes_no_allocator_setting():
    assert mmapped_bytes("import autograd, nn, models.gpt.gpt2, models.gpt.sampling") >= BLOCK


OPTIMIZER = "import autograd, nn\nnn.optim.AdamW([nn.Parameter(autograd.Tensor([1.0]))])"


def test_creating_an_optimizer_makes_the_setting_and_the_switch_turns_it_off():
    """A program's own training loop steps as fast as models.train's: without the setting, glibc maps and zeroes
    the arrays of every step afresh (the main job's step in ../shared/bench/iso_step.py: about 6,800 page faults, and
    110 ms instead of 76)."""
    assert mmapped_bytes(OPTIMIZER) == 0
    assert mmapped_bytes(OPTIMIZER, switch="0") >= BLOCK
    refused = "import autograd, nn\ntry:\n    nn.optim.AdamW([])\nexcept ValueError:\n    pass"
    assert mmapped_bytes(refused) >= BLOCK  # a refused call changes nothing


def test_the_environment_switch_makes_the_call_at_import_or_turns_it_off():
    assert mmapped_bytes("import autograd", switch="1") == 0
    assert mmapped_bytes("import autograd; assert autograd.keep_freed_memory() is False", switch="0") >= BLOCK


@pytest.mark.parametrize("command", [
    "from models.training.train import main\ntry:\n    main(['--data', 'no such file.txt'])\nexcept SystemExit:\n    pass",
    "from models.training.sample import main\ntry:\n    main(['no such folder'])\nexcept SystemExit:\n    pass",
], ids=["models.train", "models.sample"])
def test_the_commands_make_the_setting_first_even_when_they_fail_at_once(command):
    assert mmapped_bytes(command) == 0
