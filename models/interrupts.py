"""A command's Ctrl-C before it can say anything better: one line, not Python's KeyboardInterrupt traceback.

This module imports nothing but `os`, `sys`, `atexit` and the cores of
`signal` and `threading` (built into the interpreter), so that a command's
__main__ can install the hook in its first lines, before the imports that
take most of its start-up. A Ctrl-C before those lines run (while the
interpreter starts and `python -m` finds and compiles the command's file, the
first tenth of a second or so) is beyond any hook of the project's.

Under `mpiexec`, which passes a Ctrl-C to every rank, rank 0 alone says so,
and the job ends with status 130, as it does when the Ctrl-C comes later:
each rank's own line would repeat the first, and a rank killed by SIGINT makes
the launcher print a banner about a bad termination.
"""
import _signal  # signal's C core, loaded with the interpreter (signal itself imports enum)
import _thread
import atexit
import os
import sys

# Where MPI launchers give a process its rank and the job's size (MPICH's and Intel MPI's hydra, Open MPI,
# MVAPICH): nn.distributed.LAUNCHER_VARIABLES, which the hook cannot import before NumPy has loaded
LAUNCHER_VARIABLES = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                      ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"))


def exit_quietly_on_interrupt(prog):
    """A Ctrl-C that nothing catches from here on ends the program with one line instead of a traceback.

    Call it first thing in a command's __main__: an interrupt can land in its
    imports, or while the options are parsed. Python still exits as a Ctrl-C
    does (killed by SIGINT, status 130 in a shell). In an MPI job only rank 0
    prints, and the job ends with status 130 (_end_the_job).
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
            _end_the_job()
    sys.excepthook = hook
    _resend_dropped_interrupts(lambda: hook(KeyboardInterrupt, KeyboardInterrupt(), None))


def _resend_dropped_interrupts(say_interrupted):
    """A Ctrl-C that lands while a finalizer (__del__, a weakref callback) or a C library's callback runs is raised
    there, and Python drops it with "Exception ignored in": the command went on as if never interrupted (models.eval,
    in the regex module's __del__). The hook for such exceptions sends the Ctrl-C again from another thread, which
    can do so only once this one lets go of the interpreter, after the finalizer (raised in the hook, it would be
    dropped the same way). A command that ends before that thread runs (a Ctrl-C in an atexit callback) says it
    was interrupted, at exit, and ends with status 130."""
    previous = sys.unraisablehook
    unsent = []

    def send_again():
        os.kill(os.getpid(), _signal.SIGINT)
        unsent.clear()

    def unraisable(event):
        if not isinstance(event.exc_value, KeyboardInterrupt):
            previous(event)
            return
        unsent.append(event)
        try:
            _thread.start_new_thread(send_again, ())
        except RuntimeError:  # no new thread once the interpreter shuts down; at_exit has said it, or says it now
            pass

    def at_exit():  # registered first, so it runs after every other atexit callback
        if unsent:
            say_interrupted()
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
            os._exit(130)
    sys.unraisablehook = unraisable
    atexit.register(at_exit)


def _launcher_rank():
    """This process's rank in a job that an MPI launcher started with more than one process; None otherwise."""
    for rank_variable, size_variable in LAUNCHER_VARIABLES:
        if os.environ.get(size_variable, "1").strip() not in ("", "0", "1"):
            try:
                return int(os.environ.get(rank_variable, "0"))
            except ValueError:
                return 0
    return None


def _end_the_job():
    """Exit with status 130 as a rank that has joined the job (MPI_Init), which makes the launcher end the other
    ranks: one that exits before joining leaves any rank already waiting for it in MPI_Init or a collective
    waiting for ever. Without mpi4py (or interrupted again in its import) the rank returns, and Python ends it
    by SIGINT: the launcher answers that too, with its banner."""
    try:
        __import__("mpi4py.MPI")  # importing it joins the job
    except BaseException:
        return
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
