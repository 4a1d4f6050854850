"""The command lines' argument parser: argparse, but a mistake costs one line, not the whole usage.

Values are checked as they are parsed, by the `type=` functions below (a range,
a device that works, a file that exists, a folder that can be written), so a
bad option stops a program before it does any work, with one line that names
the option, the value and what it should be.
"""
import argparse
import os
from pathlib import Path

_NOT_GIVEN = object()


class Parser(argparse.ArgumentParser):
    def __init__(self, prog, description, **kwargs):
        super().__init__(prog=prog, description=description,
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    def given(self, argv, args):
        """The names (dests) of the options in `args` that `argv` sets itself rather than leaving at their defaults."""
        # argparse fills in a default only where the namespace lacks the attribute, so a namespace
        # pre-filled with a marker keeps the marker exactly where nothing was given.
        marked = self.parse_args(argv, argparse.Namespace(**{name: _NOT_GIVEN for name in vars(args)}))
        return {name for name, value in vars(marked).items() if value is not _NOT_GIVEN}

    def check(self, dest, value):
        """`value` for the option that stores into `dest` (a saved run's, say), checked as if it had been typed.

        Returns the value as the option's `type=` function makes it; a ValueError names the option.
        """
        action = next(a for a in self._actions if a.dest == dest)
        flag = action.option_strings[0] if action.option_strings else dest
        if action.nargs == 0:  # a switch, such as --no-bias
            fits = isinstance(value, bool)
        elif value is None:
            fits = action.default is None
        else:
            fits = isinstance(value, (int, float, str)) and not isinstance(value, bool)
            if fits and action.type is not None:
                try:
                    value = action.type(str(value))
                except argparse.ArgumentTypeError as exc:
                    raise ValueError(f"{flag} {exc}") from None
            fits = fits and (not action.choices or value in action.choices)
        if not fits:
            raise ValueError(f"{flag} cannot be {value!r}")
        return value


def interval(kind, bounds):
    """A `type=` function: an int or float (`kind`) within `bounds`, written as in maths, e.g. "[0, 1)" or "(0, inf)".

    The rule is autograd.intervals' (the optimizers' own): NaN is in no interval
    and an infinity only in one closed at it, which no option here is.
    """
    from autograd.intervals import bounds_of, within  # here, not above: the PyTorch peer imports this module
    bounds_of(bounds)  # a mistyped interval fails when the parser is built, not when an option is given

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {noun} in {bounds}, got {text!r}") from None
        if not within(value, bounds):
            raise argparse.ArgumentTypeError(f"must be in {bounds}, got {text}")
        return value

    return parse


def device(name):
    """A `type=` function: "cpu", or "cuda" where CuPy and a GPU are there to run it."""
    from autograd import backend  # here, not above: the benchmarks' PyTorch peer parses with this module alone
    if name not in backend.DEVICES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(backend.DEVICES)}, got {name!r}")
    try:
        backend.xp_for(name)
    except RuntimeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name


def _path(text):
    if not text:
        raise argparse.ArgumentTypeError("expected a path, got ''")
    return Path(text)


def input_file(text):
    """A `type=` function: a file that exists."""
    path = _path(text)
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "is not a regular file" if path.exists() else ""
        raise argparse.ArgumentTypeError(f"{text} {what}" if what else f"no file {text}")
    return text


def input_folder(text):
    """A `type=` function: a folder that exists."""
    path = _path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder" if path.exists() else f"no folder {text}")
    return text


def output_folder(text):
    """A `type=` function: a folder that is there or can be made, and whose parent can be written.

    The parent must be writable as well, because a checkpoint is written beside
    the folder and then takes its place; and the folder must not hold the
    current working directory, which that replacement would pull from under it.
    """
    path = _path(text).absolute()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    if Path.cwd().resolve().is_relative_to(path.resolve()):
        raise argparse.ArgumentTypeError(f"{text} is the current folder or holds it; "
                                         "give the checkpoints a folder of their own, e.g. out")
    ancestor = path.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise argparse.ArgumentTypeError(f"cannot make {text}: {ancestor} is a file")
    unwritable = next((p for p in (ancestor, path) if p.is_dir() and not os.access(p, os.W_OK | os.X_OK)), None)
    if unwritable is not None:
        raise argparse.ArgumentTypeError(f"cannot write {text}: {unwritable} is not writable")
    return text
