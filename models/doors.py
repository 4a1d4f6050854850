"""Front doors: a short name (`models.train`) that is the real module (models/training/train.py), not a copy.

A front door is a file in models/ of two lines, `front_door(__name__, "models.training.train")`:

- imported, it puts the real module in its own place in sys.modules, so the
  import returns that very object: `models.train is models.training.train`, and
  a class or an isinstance check means the same whichever name reached it;
- run (`python -m models.train`), it installs the one-line Ctrl-C first (the
  imports that follow take most of a command's start-up, see interrupts.py) and
  then runs the real module's main(); a library (models.gpt2) says it is one.
  Output piped to a reader that stops early (`| head`) ends the command quietly,
  not with a BrokenPipeError traceback.
"""
import importlib
import os
import select
import sys

from models.interrupts import exit_quietly_on_interrupt, main_running


def front_door(name, real):
    """Make module `name` (a front door's __name__) the module `real`, or run real's main() if `name` is __main__."""
    if name == "__main__":
        exit_quietly_on_interrupt(real.rpartition(".")[2])
        try:
            module = importlib.import_module(real)
        except ValueError as exc:  # a switch read at import set to a value it does not take (autograd.switches)
            sys.exit(f"{real.rpartition('.')[2]}: error: {exc}")
        if not hasattr(module, "main"):
            sys.exit(f"{real} is a library with no command line: import it (see its docstring)")
        sys.exit(run_main(module.main, real.rpartition(".")[2]))
    sys.modules[name] = importlib.import_module(real)


def run_main(main, prog):
    """A command's exit status from `main()`: output piped to a reader that stopped early (`| head`) ends it
    quietly, with status 0, rather than with a BrokenPipeError traceback (the viz commands run theirs here too);
    a switch set to a value it does not take (autograd.switches, read by the first op that consults it) is one
    line naming the command `prog`."""
    from autograd.switches import SwitchError  # here, not above: the Ctrl-C hook goes in before the engine loads
    main_running(True)
    try:
        code = main()
        if sys.stdout is not None:  # None where the command started with no stdout at all (`>&-`)
            sys.stdout.flush()  # here, where a closed pipe can be caught, rather than at exit
    except SwitchError as exc:
        code = f"{prog}: error: {exc}"
    except BrokenPipeError:
        if not _reader_gone(sys.stdout):  # another pipe broke (a worker's): a real error
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left for exit to flush
        code = 0
    finally:
        main_running(False)
    return code


def stdout_reader_left(error):
    """Whether `error`, raised writing a command's output, is a broken pipe to standard output's reader gone early
    (`--out /dev/stdout | head`): let it reach run_main, which ends the command quietly. Any other broken pipe (a
    FIFO's reader that left) is an error of the write, to report in one line."""
    return isinstance(error, BrokenPipeError) and _reader_gone(sys.stdout)


def _reader_gone(stream):
    """Whether `stream` is a pipe whose reader has closed it (`| head` read its lines): it polls as an error."""
    try:
        poll = select.poll()
        poll.register(stream.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or no descriptor behind the stream
        return False
