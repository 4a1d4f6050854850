"""A command's Ctrl-C before it can say anything better: one line, not Python's KeyboardInterrupt traceback.

This module imports nothing but `sys` (loaded with the interpreter), so that a
command's __main__ can install the hook in its first lines, before the imports
that take most of its start-up. A Ctrl-C in the few milliseconds before that,
while the interpreter itself starts, is beyond any hook of Python's.
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
        if issubclass(kind, KeyboardInterrupt):
            print(f"\n{prog}: interrupted", file=sys.stderr)
        else:
            previous(kind, value, traceback)
    sys.excepthook = hook
