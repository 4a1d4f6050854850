"""A command's Ctrl-C before it can say anything better: one line, not Python's KeyboardInterrupt traceback.

This module imports nothing but `os`, `sys`, `time` and the cores of `signal`
and `threading` (built into the interpreter), so that a command's __main__ can
install the hook in its first lines, before the imports that take most of its
start-up. A Ctrl-C before those lines run (while the
interpreter starts and `python -m` finds and compiles the command's file, the
first tenth of a second or so) is beyond any hook of the project's.

Under `mpiexec`, which passes a Ctrl-C to every rank, rank 0 alone says so,
and the job ends with status 130, as it does when the Ctrl-C comes later:
each rank's own line would repeat the first, and a rank killed by SIGINT makes
the launcher print a banner about a bad termination. A SIGINT that reached
another rank alone (`kill -INT`) ends the job all the same, with that rank's
line, once rank 0 has had the time to end it (_end_the_job).
"""
import _signal  # signal's C core, loaded with the interpreter (signal itself imports enum)
import _thread
import os
import sys
import time

# Where MPI launchers give a process its rank and the job's size (MPICH's and Intel MPI's hydra, Open MPI,
# MVAPICH): nn.distributed.LAUNCHER_VARIABLES, which the hook cannot import before NumPy has loaded
LAUNCHER_VARIABLES = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                      ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"))
_command = {"running": False}  # while the command's main() runs (models.doors.run_main)
# How long a rank other than 0 waits, once every rank has joined the job, for rank 0 to end it: a Ctrl-C that
# mpiexec passed to every rank reaches rank 0's line and exit within milliseconds of joining
RANK_0_GRACE_SECONDS = 2.0


def exit_quietly_on_interrupt(prog):
    """A Ctrl-C that nothing catches from here on ends the program with one line instead of a traceback.

    Call it first thing in a command's __main__: an interrupt can land in its
    imports, or while the options are parsed. Python still exits as a Ctrl-C
    does (killed by SIGINT, status 130 in a shell). In an MPI job rank 0
    prints (another rank only where rank 0 did not end the job), and the job
    ends with status 130 (_end_the_job).
    """
    previous = sys.excepthook

    def hook(kind, value, traceback):
        if not came_from_ctrl_c(value):
            previous(kind, value, traceback)
            return
        rank = _launcher_rank()
        if rank in (None, 0):
            print(f"\n{prog}: interrupted", file=sys.stderr)
        if rank is not None:
            _end_the_job(rank, f"\n{prog}: rank {rank}: interrupted")
    sys.excepthook = hook
    previous_unraisable = sys.unraisablehook

    def unraisable(event):
        # A Ctrl-C that lands while a finalizer (__del__, a weakref callback) or a C library's callback runs is
        # raised there, and Python drops it with "Exception ignored in": the command went on as if never
        # interrupted (models.eval, in the regex module's __del__). Another thread sends it again, which it can do
        # only once this one lets go of the interpreter, after the finalizer (raised here, it would be dropped the
        # same way). Outside main(), Python's own handling: before it, an exit on a bad setting; after it, the
        # command is ending, and its clean-up (atexit's callbacks) is not to be cut short, nor IPython's after
        # `%run -m models.…`.
        if _command["running"] and isinstance(event.exc_value, KeyboardInterrupt):
            try:
                _thread.start_new_thread(os.kill, (os.getpid(), _signal.SIGINT))
                return
            except RuntimeError:  # no new thread: the interpreter is shutting down
                pass
        previous_unraisable(event)
    sys.unraisablehook = unraisable


def main_running(running):
    """Whether the command's main() runs (models.doors.run_main says so around it): while it does, a Ctrl-C that a
    finalizer drops is sent again; before and after, it is Python's to report."""
    _command["running"] = running


def _launcher_rank():
    """This process's rank in a job that an MPI launcher started with more than one process; None otherwise."""
    for rank_variable, size_variable in LAUNCHER_VARIABLES:
        if os.environ.get(size_variable, "1").strip() not in ("", "0", "1"):
            try:
                return int(os.environ.get(rank_variable, "0"))
            except ValueError:
                return 0
    return None


def _end_the_job(rank, line):
    """Exit with status 130 as a rank that has joined the job (MPI_Init), which makes the launcher end the other
    ranks: one that exits before joining leaves any rank already waiting for it in MPI_Init or a collective
    waiting for ever. Without mpi4py (or interrupted again in its import) the rank returns, and Python ends it
    by SIGINT: the launcher answers that too, with its banner.

    Rank 0 has said so already. Another rank cannot tell whether the Ctrl-C reached rank 0 too, so it waits
    RANK_0_GRACE_SECONDS after joining (MPI_Init returns on no rank before every rank has called it): if it did,
    rank 0 has printed its line by then (before its own MPI_Init, or as that returns) and ended the job, this rank
    with it. Still running, the SIGINT was this rank's alone (or rank 0 waits in a collective this rank will never
    join): it prints `line`."""
    try:
        __import__("mpi4py.MPI")  # importing it joins the job
    except BaseException:
        return
    if rank != 0:
        _signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # a second Ctrl-C must not cut the wait short
        time.sleep(RANK_0_GRACE_SECONDS)
        print(line, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os._exit(130)


def came_from_ctrl_c(error):
    """Whether `error` is a KeyboardInterrupt, or was raised because of one: an extension module interrupted while
    it loads (NumPy's) makes an ImportError of it, and zipfile interrupted inside np.savez a ValueError."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False
