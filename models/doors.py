"""Front doors: a short name (`models.train`) that is the real module (models/training/train.py), not a copy.

A front door is a file in models/ of two lines, `front_door(__name__, "models.training.train")`:

- imported, it puts the real module in its own place in sys.modules, so the
  import returns that very object: `models.train is models.training.train`, and
  a class or an isinstance check means the same whichever name reached it;
- run (`python -m models.train`), it installs the one-line Ctrl-C first (the
  imports that follow take most of a command's start-up, see interrupts.py) and
  then runs the real module's main(); a library (models.gpt2) says it is one.
"""
import importlib
import sys

from models.interrupts import exit_quietly_on_interrupt


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
        sys.exit(module.main())
    sys.modules[name] = importlib.import_module(real)
