"""The CPU kernels' machinery: one thread pool, fair under load, that NumPy's OpenBLAS shares; numba's compilations.

- Threads: OMP_NUM_THREADS, else the cores this process may run on, or the
  share nn.distributed gives each MPI rank (`set_threads`), less the cores
  other processes keep busy (`pool_threads`).
- One pool (`shared_pool`): where NumPy brings its own OpenBLAS and the system
  has an OpenMP runtime (libgomp), numba's OpenMP threads, which wake within
  microseconds, run the kernels and the matrix products too, each thread
  calling OpenBLAS on its share of the rows, and OpenBLAS itself keeps one
  thread. Two pools side by side fight: an OpenMP region right after an
  OpenBLAS product took 2.7 ms instead of 3 µs, the spinning threads of each
  taking the cores from the other's. Elsewhere OpenBLAS keeps its threads and
  the kernels use numba's "workqueue" layer, whose idle threads sleep.
- Compilations (`compiled`, `jitted`): kernels are cached on disk (numba's
  `cache=True`, where `CACHE` found a writable folder); the first run compiles
  them (tens of seconds), later runs load them, and compile afresh any whose
  files cannot be read (`_CacheFile`). A Ctrl-C meanwhile is held
  until the kernel at hand is done, and LLVM's code pages are handed back after
  (`release_compiler_pages`).

Importing this module probes only for a cache folder (`CACHE`): the BLAS and the OpenMP runtime are
looked for when cpu.py first asks (`shared_pool`), so the tokenizer's kernels
(models/gpt/bpe_kernels.py), which need `compiled` alone, pay for none of it.
"""
import collections
import contextlib
import ctypes
import functools
import os
import pickle
import signal
import sys
import tempfile
import threading
import time

import numba
from numba.core import caching

from .. import switches

if numba.config.DISABLE_JIT:
    # numba's decorators then return the Python functions, but the kernels call LLVM intrinsics (_sum's lanes,
    # fmuladd) that only compiled code has: they stopped the first op with an AttributeError deep in this module
    raise ImportError("NUMBA_DISABLE_JIT=1 turns numba's compiler off, and gptgrad's CPU kernels and byte-level "
                      "tokenizers exist only compiled: the ops compose their formulas from NumPy instead (the bits "
                      "of AUTOGRAD_FUSED=0); unset NUMBA_DISABLE_JIT for the kernels and the byte-level tokenizers "
                      "(gpt2)")

SGEMM, SGEMV, _SET_BLAS_THREADS = "scipy_cblas_sgemm64_", "scipy_cblas_sgemv64_", "scipy_openblas_set_num_threads64_"


@functools.cache
def blas():
    """(path, library) of NumPy's own OpenBLAS when the kernels share one pool with it, else None.

    AUTOGRAD_SHARED_POOL=0 keeps two pools (OpenBLAS's threads, numba's workqueue), as where the shared one is
    missing. Asked first (by cpu.py's import), it also picks numba's threading layer, which must be set before
    numba's first parallel kernel."""
    found = _numpy_openblas() if switches.read("AUTOGRAD_SHARED_POOL") != "0" and _has_openmp() else None
    numba.config.THREADING_LAYER = "omp" if found else "workqueue"
    return found


def shared_pool():
    """Whether numba's threads run the kernels and the matrix products alike (see the module's docstring)."""
    return blas() is not None


def _numpy_openblas():
    """(path, library) of the OpenBLAS that NumPy's wheels load (scipy-openblas, 64-bit integers); None where
    NumPy uses another BLAS, or on a system without /proc (this is read from the process's own mappings)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.rsplit("/", 1)[-1]}
    except OSError:
        return None
    for path in sorted(paths):
        library = ctypes.CDLL(path)
        if all(hasattr(library, name) for name in (SGEMM, SGEMV, _SET_BLAS_THREADS)):
            return path, library
    return None


def _has_openmp():
    try:
        from numba.np.ufunc import omppool  # noqa: F401  (needs the system's OpenMP runtime, libgomp)
    except (ImportError, OSError):
        return False
    return True


def _probe():
    """What `_cache_possible` asks numba to find a cache folder for: a function of the kernels' own folder."""


def _cache_possible():
    """Whether numba may keep the kernels' compilations on disk (`cache` of their njit options).

    numba keeps them in NUMBA_CACHE_DIR, else beside the source (__pycache__), else in the user's cache folder
    (~/.cache/numba), each if writable; where none is (a read-only install run with a read-only HOME), its
    cache=True raised "cannot cache function ...: no locator available" when the kernels were imported. Then they
    go to this user's own folder in the temporary folder, and where there is none either, they are compiled afresh
    in every process, said in one line. Cached or not, a kernel computes the same bits."""
    try:
        caching.FunctionCache(_probe)
        return True
    except RuntimeError:
        pass
    uid = os.getuid() if hasattr(os, "getuid") else None
    folder = os.path.join(tempfile.gettempdir(), f"gptgrad-numba-{uid}")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        # A folder that another user made could hand this process their compiled code to run.
        if uid is None or os.stat(folder).st_uid == uid:
            numba.config.CACHE_DIR = folder
            caching.FunctionCache(_probe)
            return True
    except (OSError, RuntimeError):
        pass
    print(f"gptgrad: no writable folder for numba's kernel cache (beside the source, in HOME's cache, or {folder}): "
          "the kernels compile afresh in every run (seconds to tens of seconds); set NUMBA_CACHE_DIR to a writable "
          "folder to keep them", file=sys.stderr)
    return False


# What unpickling a file cut short or of arbitrary bytes raises.
_UNREADABLE = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError, IndexError,
               KeyError, MemoryError, OverflowError)


class _CacheFile(caching.IndexDataCacheFile):
    """numba's index and data files of a cached function, of which one that cannot be unpickled counts as missing:
    the function compiles afresh and its files are written again. numba read them unguarded, so a file cut short
    (a full disk, a copy or a backup interrupted) or overwritten stopped every later run at the first call of its
    kernel with "pickle data was truncated" or "invalid load key"."""

    def _load_index(self):
        try:
            return super()._load_index()
        except _UNREADABLE:
            return {}

    def _load_data(self, name):
        try:
            return super()._load_data(name)
        except _UNREADABLE:
            return None


CACHE = _cache_possible()
# Every cached function's files, the helpers numba compiles for a kernel's call included, are opened through the
# class numba names here when the function is defined.
caching.IndexDataCacheFile = _CacheFile

# No fast math: every sum, product and multiply-add is computed in the order the source writes it, so a kernel
# gives the same bits whichever way LLVM compiles it for one CPU (serial or threaded, freshly or from the cache).
# With reordering allowed ("reassoc"), each compilation vectorised the row sums its own way: the threaded
# layer norm's dx differed from the serial one's in the last bit, and a first run (compiled) from every later one
# (cached). Sums are vectorised by hand instead, as eight running sums (_sum, _dot).
JIT = dict(cache=CACHE, error_model="numpy")  # numpy: x/0 is inf, no branch to raise


def jitted(**options):
    """numba.njit(**options) with the kernels' settings (cached where `CACHE`, no fast math), its compilations held by
    `compiled`: for a function that Python calls."""
    return lambda fn: compiled(numba.njit(**options, **JIT)(fn))


def compiled(dispatcher, twin=None):
    """`dispatcher` (a numba function called from Python), each of whose compilations or loads from the cache (the
    first call for a kind of arguments) holds a Ctrl-C until it ends, and then hands LLVM's pages back. A `twin`,
    the same source's other form (serial, or threaded where the pool has more than one thread), is compiled or
    loaded for those arguments at the same time.

    numba calls back into Python while it compiles and while it loads from its cache; a KeyboardInterrupt raised
    in such a callback is printed as "Exception ignored" and dropped, so a Ctrl-C then went unnoticed and
    training went on. numba looks its compile method up on the dispatcher only when a call finds no compiled
    version, so the calls after the first pay nothing for this.
    """
    compile_for_args = dispatcher._compile_for_args

    def compile_holding_interrupts(*args, **kws):
        with _interrupts_held():
            compiled_version = compile_for_args(*args, **kws)
            if twin is not None and (_pool["given"] > 1 or not twin.targetoptions.get("parallel")):
                twin.compile(tuple(map(twin.typeof_pyval, args)))  # its own compile: no call back into this one
        release_compiler_pages()
        return compiled_version
    dispatcher._compile_for_args = compile_holding_interrupts
    return dispatcher


@contextlib.contextmanager
def _interrupts_held():
    """A block in which SIGINT is only noted; the program's own handler runs once the block ends (at once where
    this is not the main thread, which alone receives signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted = []
    handler = signal.signal(signal.SIGINT, lambda number, frame: noted.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
        if noted and callable(handler):
            handler(signal.SIGINT, noted[0])
        elif noted and handler == signal.SIG_DFL:
            os.kill(os.getpid(), signal.SIGINT)


def release_compiler_pages():
    """Hand back LLVM's code pages, once a kernel is loaded; True if the OS took them.

    Loading even a cached kernel runs LLVM, whose library (libllvmlite) then keeps
    about 65 MB of its code resident: in the main job that was more than the model
    and its training together (95 MB without numba, 195 with). Those pages are read
    only, copies of the file's, so the OS may drop them (madvise MADV_PAGEOUT, Linux
    5.4 and later) and read them in again if LLVM ever runs again. Elsewhere this
    does nothing.
    """
    try:
        with open("/proc/self/maps") as maps:
            spans = [line.split()[:2] for line in maps if line.rstrip().endswith(_LLVM_LIBRARY)]
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return False
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    took = False
    for span, permissions in spans:
        if "w" not in permissions:  # code and constants; the relocated data stays
            start, end = (int(address, 16) for address in span.split("-"))
            took = madvise(start, end - start, _MADV_PAGEOUT) == 0 or took
    return took


_LLVM_LIBRARY = "libllvmlite.so"
_MADV_PAGEOUT = 21


def threads():
    """The threads a kernel may run on: OMP_NUM_THREADS, else every core this process may use."""
    given = os.environ.get("OMP_NUM_THREADS", "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# The pool: `given` threads by set_threads, `now` those it runs, fewer while other processes keep cores busy;
# `others`, the last looks at the machine (threads of other processes running).
_pool = {"given": 1, "now": 1, "next_look": 0.0, "others": collections.deque(maxlen=6)}
LOOK_EVERY = 0.05  # seconds between two looks
NARROW_AFTER, WIDEN_AFTER = 3, 6  # looks in a row that found cores busy (free) before the pool narrows (widens)


def set_threads(n):
    """Run the kernels (and with the shared pool, the matrix products) on up to `n` threads (at most numba's pool,
    which is as wide as the machine). OpenBLAS is then told again to keep one thread, whoever changed it."""
    _pool["given"] = max(1, min(n, numba.config.NUMBA_NUM_THREADS))
    _pool["others"].clear()
    _use_threads(_pool["given"])


def _use_threads(n):
    numba.set_num_threads(n)
    _pool["now"] = n
    if shared_pool():
        getattr(blas()[1], _SET_BLAS_THREADS)(ctypes.c_int(1))


def pool_threads():
    """The threads the next kernel runs on: set_threads' count, less the cores that other processes keep busy.

    A parallel region waits for its slowest thread, and with more threads ready to run than cores, one of ours
    is often off its core while the others spin: two trainings side by side on 2 cores each took 8–10× their
    time alone, where a fair share is 2×. So every LOOK_EVERY seconds the threads of other processes that are
    running are counted (from Linux's /proc), and the pool narrows to the cores they leave once NARROW_AFTER
    looks in a row found them busy, and widens once WIDEN_AFTER looks found cores free. Any width gives the
    same bits: the kernels cut their work the same way on every thread count.
    """
    now = time.monotonic()
    if now >= _pool["next_look"]:
        _pool["next_look"] = now + LOOK_EVERY
        others = _running_elsewhere()
        if others is not None:
            _pool["others"].append(others)
            _resize(list(_pool["others"]), os.cpu_count() or 1)
    return _pool["now"]


def _resize(looks, cores):
    """Narrow or widen the pool after `looks`, the last counts of other processes' running threads."""
    def width(busy):
        return max(1, min(_pool["given"], cores - busy))
    recent = looks[-NARROW_AFTER:]
    if len(recent) == NARROW_AFTER and width(min(recent)) < _pool["now"]:
        _use_threads(width(min(recent)))
    elif len(looks) >= WIDEN_AFTER and width(max(looks[-WIDEN_AFTER:])) > _pool["now"]:
        _use_threads(width(max(looks[-WIDEN_AFTER:])))


def _running_elsewhere():
    """Threads running (or ready to run) on the machine that are not this process's; None where /proc can't tell."""
    try:
        with open("/proc/stat", "rb") as stat:
            running = next(int(line.split()[1]) for line in stat if line.startswith(b"procs_running"))
        ours = 0
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/stat", "rb") as stat:
                fields = stat.read()
            ours += fields[fields.rindex(b")") + 2:][:1] == b"R"  # the state follows the command's name
    except (OSError, StopIteration, ValueError):
        return None
    return max(0, running - ours)
