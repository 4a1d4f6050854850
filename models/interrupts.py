"""A command's Ctrl-C before it can say anything better: one line, not Python's KeyboardInterrupt traceback.

This module imports nothing but `sys` (loaded with the interpreter), so that a
command's __main__ can install the hook in its first lines, before the imports
that take most of its start-up. A Ctrl-C before those lines run (while the
interpreter starts and `python -m` finds and compiles the command's file, the
first tenth of a second or so) is beyond any hook of the project's.
"""
import sys


def exit_quietly_on_interrupt(prog):
    """A Ctrl-C that nothing catches from here on ends the program with one line instead of a traceback.

    Call it first thing in a command's __main__: an interrupt can land in its
    imports, or while the options are parsed. Python still exits as a Ctrl-C
    does (killed by SIGINT, status 130 in a shell).
    """
    previous = sys.excepthook

    def hook(kind, value, traceback):
        if came_from_ctrl_c(value):
            print(f"\n{prog}: interrupted", file=sys.stderr)
        else:
            previous(kind, value, traceback)
    sys.excepthook = hook


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
