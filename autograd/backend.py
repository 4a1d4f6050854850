"""The array backends: NumPy for "cpu", CuPy for "cuda".

Ops compute through the array module (`xp`) of their inputs' device; the few
calls whose spelling differs between NumPy and CuPy (scatter-add, random
numbers, copies to the host) live here and nowhere else. CuPy is imported only
when a tensor first asks for "cuda". `keep_freed_memory()` asks glibc to keep
freed array memory for reuse: a setting for the whole process, made when a
program calls it or creates an optimizer (the training and sampling commands do).
"""
import contextlib
import copy
import ctypes
import numbers
import os
import random

import numpy

from . import switches

DEVICES = ("cpu", "cuda")
_cupy = None
_generators = {}
_seed = None


def _load_cupy():
    global _cupy
    if _cupy is None:
        try:
            import cupy
            cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # ImportError, or CUDA without a usable GPU
            raise RuntimeError(
                "device 'cuda' needs CuPy and an NVIDIA GPU "
                f"({type(exc).__name__}: {exc}); install it with "
                "`pip install -e \".[gpu]\"` (CuPy for CUDA 12) on a machine with a GPU"
            ) from None
        _cupy = cupy
    return _cupy


def check_device(device):
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; use one of {DEVICES}")
    return device


def xp_for(device):
    """The array module that computes on `device`."""
    if device == "cpu":
        return numpy
    check_device(device)
    return _load_cupy()


def nccl():
    """CuPy's NCCL binding, cupy.cuda.nccl: a submodule CuPy does not import by itself.

    Its `available` says whether NCCL was found.
    """
    _load_cupy()
    import cupy.cuda.nccl
    return cupy.cuda.nccl


def use_gpu(index):
    """Compute on GPU number `index`, modulo the GPUs present (a rank's local rank picks its GPU)."""
    cupy = xp_for("cuda")
    cupy.cuda.Device(index % cupy.cuda.runtime.getDeviceCount()).use()


def current_stream():
    """The CUDA stream CuPy queues work on now: NCCL must queue its calls on the same one."""
    return xp_for("cuda").cuda.get_current_stream()


def pointer(array):
    """The address of a contiguous array's first element, on the host or on the GPU."""
    return array.data.ptr if device_of(array) == "cuda" else array.ctypes.data


def device_of(array):
    """'cpu' for a NumPy array, 'cuda' for a CuPy one."""
    if isinstance(array, numpy.ndarray):
        return "cpu"
    if _cupy is not None and isinstance(array, _cupy.ndarray):
        return "cuda"
    return None


def to_device(array, device):
    """Copy `array` to `device` (a no-op when it is already there)."""
    if device_of(array) == device:
        return array
    if device == "cpu":
        return _cupy.asnumpy(array)
    return xp_for(device).asarray(array)


def to_host(array):
    """A NumPy array: the one place device data is copied back to the host. A NumPy scalar, which NumPy's ops on
    0-d arrays return (a 0-d gradient, say), becomes a 0-d array."""
    if isinstance(array, numpy.generic):
        return numpy.asarray(array)
    return array if isinstance(array, numpy.ndarray) else _cupy.asnumpy(array)


def scatter_add(target, index, values):
    """target[index] += values, adding repeated indices once per occurrence.

    Plain `target[index] += values` would keep only the last of repeated rows,
    the bug lesson 1 warns about: the embedding row of a token seen twice must
    receive both gradients. float16 is added in float32 and rounded once:
    numpy.add.at and CuPy's atomics add it in float16, where 2048 + 1 rounds
    back to 2048 (4096 picks of a row of ones summed to 2048).
    """
    if target.dtype == "float16":
        wide = target.astype("float32")
        scatter_add(wide, index, values.astype("float32"))
        target[...] = wide
    elif not isinstance(target, numpy.ndarray):
        import cupyx
        cupyx.scatter_add(target, index, values)
    elif isinstance(index, numpy.ndarray) and index.ndim == 1 and target.ndim == values.ndim == 2:
        _add_rows(target, index, values)
    else:
        numpy.add.at(target, index, values)


def _add_rows(target, rows, values):
    """target[rows] += values for whole rows (non-negative indices), on the CPU: sort the rows, sum each run of
    equal ones, add once.

    About 2.5 times faster than numpy.add.at, which adds one row at a time. Rows that are already in increasing
    order, each once (a position embedding's), are added in place at once: the same sums, without the sort (in the
    main job's step, 150 µs of the position table's 64 rows).
    """
    if not len(rows):
        return
    if (rows[1:] > rows[:-1]).all():
        target[rows] += values
        return
    order = numpy.argsort(rows, kind="stable")
    rows = rows[order]
    starts = numpy.flatnonzero(numpy.concatenate(([True], rows[1:] != rows[:-1])))
    target[rows[starts]] += numpy.add.reduceat(values[order], starts, axis=0)


PIECE = 1 << 16  # elements: 256 KB of float32, which stays in a core's L2 cache


def pieces(*arrays):
    """Matching pieces of same-shaped arrays, for a chain of in-place elementwise updates.

    On the CPU, flat runs of PIECE elements: the whole chain runs over one
    piece while it sits in cache, so memory is read once rather than once per
    pass (AdamW's update is a dozen passes). On a GPU, or for arrays that are
    not C-contiguous, the whole arrays: one kernel launch per pass.
    """
    if not isinstance(arrays[0], numpy.ndarray) or not all(a.flags.c_contiguous for a in arrays):
        yield arrays
        return
    flat = [a.reshape(-1) for a in arrays]
    for start in range(0, flat[0].size, PIECE):
        yield tuple(f[start:start + PIECE] for f in flat)


def wide_sum(array, axis=None, keepdims=False):
    """Σ array over `axis` (NumPy's or CuPy's sum), float16 added in float32 and rounded once, as in PyTorch: NumPy
    adds float16 along a strided axis in float16, where 2048 + 1 rounds back to 2048 (5000 ones summed to 2048)
    and 60000 + 60000 − 60000 overflows. The op Sum and the gradients summed to an input's shape use it."""
    if array.dtype == "float16":
        return array.sum(axis=axis, keepdims=keepdims, dtype="float32").astype(array.dtype)
    return array.sum(axis=axis, keepdims=keepdims)


def quiet_overflow(array):
    """A context in which NumPy does not warn that a product or exp overflowed to inf (CuPy never warns)."""
    return numpy.errstate(over="ignore") if isinstance(array, numpy.ndarray) else contextlib.nullcontext()


def quiet_division(array):
    """A context in which NumPy does not warn of x/0, 0 · inf or ln 0 (CuPy never warns): for an op that
    computes such a value knowingly and replaces it."""
    return (numpy.errstate(divide="ignore", invalid="ignore") if isinstance(array, numpy.ndarray)
            else contextlib.nullcontext())


def free_memory():
    """Bytes a new GPU array can still take: the device's free memory plus the blocks CuPy's pool holds free."""
    free, _ = _cupy.cuda.Device().mem_info
    return free + _cupy.get_default_memory_pool().free_bytes()


def keep_freed_memory():
    """Have glibc keep freed array memory for reuse instead of handing it back to the OS; True if it now does.

    A process-wide setting of the C library, so importing the engine leaves
    it alone: creating an optimizer makes the call (the process trains), and
    so do the commands that train or generate (`python -m models.train`,
    `python -m models.sample`, first) and the benchmarks.

    What it buys: glibc serves a block above its mmap threshold (128 KB at
    first) with a fresh mmap() and trims the free top of its heap, while a
    training step allocates and frees hundreds of arrays of a few hundred KB;
    so every step the kernel faults in and zeroes pages again. The main job's
    step (benchmarks.train_step's model, measured 2026-12-01) takes about
    10,300 page faults and 120 ms without the call, 8 and 80 ms with it.
    glibc raises both thresholds by itself once the process frees a large
    block (models.train's data loading happens to), so the call makes that
    speed hold whatever the process did before. What it costs: freed memory
    stays resident for reuse (every block comes from the heap, and up to 1 GB
    of free heap top is kept), so the resident size no longer shrinks after a
    peak. Blocks above glibc's largest mmap threshold (32 MB) come from the
    heap too: a GPT-2 small step at 1 × 128 otherwise maps and zeroes its
    154 MB embedding-sized gradients afresh every time (1,700–1,900 page
    faults a step instead of 150–250, and 1.6–1.9 s instead of 1.1–1.3 s,
    with a lower peak: 2.4 GB instead of 2.5). Against glibc at its first thresholds
    (MALLOC_MMAP_THRESHOLD_=131072) 300 iterations of the main job peak at
    163 MB rather than 171 MB, at 148 ms a step rather than 73.

    Does nothing (False) where the C library has no mallopt (it is glibc's),
    when MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or MALLOC_MMAP_MAX_ are set (those choose
    for themselves), or with AUTOGRAD_KEEP_FREED_MEMORY=0. With
    AUTOGRAD_KEEP_FREED_MEMORY=1, importing autograd makes the call, for a
    program that imports the engine and cannot be changed to call it.
    """
    if switches.read("AUTOGRAD_KEEP_FREED_MEMORY") == "0":
        return False
    if any(name in os.environ for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_")):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold, m_mmap_max = -1, -3, -4
    mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest allowed value on 64-bit
    mallopt(m_mmap_max, 0)  # and above it too: GPT-2's 154 MB embedding gradients from the heap, not fresh maps
    mallopt(m_trim_threshold, 1 << 30)
    return True


if switches.read("AUTOGRAD_KEEP_FREED_MEMORY") == "1":
    keep_freed_memory()


def _checked_seed(who, seed):
    """`seed` as a Python int, or a ValueError naming `who`: NumPy's generators take no negative one, and an
    unchecked one would fail only at the first draw, in NumPy's words, or (None) seed from the OS."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2 ** 128:
        raise ValueError(f"{who}: a seed is an integer from 0 up to 2**128 - 1 (NumPy's generators take no "
                         f"negative one), got {seed!r}")
    return int(seed)


def manual_seed(seed):
    """Seed the random generators of every device (dropout, randn, init): the process's, shared by its threads, as
    torch.manual_seed's."""
    global _seed
    _seed = _checked_seed("manual_seed", seed)
    _generators.clear()


def generator(device):
    """The seeded random generator of `device` (NumPy's or CuPy's Generator API)."""
    if device not in _generators:
        _generators[device] = xp_for(device).random.default_rng(_seed)
    return _generators[device]


def get_rng_state():
    """The CPU generator's state, a plain dict (checkpoints store it to resume exactly)."""
    return generator("cpu").bit_generator.state


def set_rng_state(state):
    generator("cpu").bit_generator.state = state


@contextlib.contextmanager
def seeded(seed):
    """A block with random streams of its own, as after manual_seed(seed); the caller's come back untouched.

    Every device's generator inside starts from `seed`; on leaving, the
    caller's seed and generators are back as they were, neither advanced nor
    reseeded, so a generator first asked for afterwards still starts from the
    caller's seed. For work that must be reproducible whatever the caller
    seeded (a demo model's initialisation), or whose draws are thrown away.
    The generators are the process's (as torch.random.fork_rng's): another
    thread drawing meanwhile draws from this block's streams.
    """
    global _seed, _generators
    seed = _checked_seed("seeded", seed)
    callers = _seed, _generators
    _seed, _generators = seed, {}
    try:
        yield
    finally:
        _seed, _generators = callers


def snapshot_rng(device):
    """A copy of `device`'s generator as it stands now: `replaying` it draws the same numbers again."""
    return copy.deepcopy(generator(device))


def snapshot_host_rngs():
    """The states of NumPy's global generator (np.random.*) and Python's `random`, which user code draws from."""
    return numpy.random.get_state(), random.getstate()


@contextlib.contextmanager
def replaying_host(snapshot):
    """Inside, NumPy's and Python's global generators draw again from `snapshot` (snapshot_host_rngs); after,
    they go on from where they stood before, as if the block had drawn nothing."""
    live = snapshot_host_rngs()
    numpy.random.set_state(snapshot[0])
    random.setstate(snapshot[1])
    try:
        yield
    finally:
        numpy.random.set_state(live[0])
        random.setstate(live[1])


@contextlib.contextmanager
def replaying(device, snapshot):
    """Inside, `device` draws from a copy of `snapshot` (from snapshot_rng); the live generator comes back after,
    neither advanced nor reseeded. Recomputing a forward pass this way redraws its dropout masks exactly."""
    live = generator(device)
    _generators[device] = copy.deepcopy(snapshot)
    try:
        yield
    finally:
        _generators[device] = live
