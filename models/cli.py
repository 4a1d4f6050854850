"""The command lines' argument parser: argparse, but a mistake costs one line, not the whole usage.

Values are checked as they are parsed, by the `type=` functions below (a range,
a device that works, a file that exists, a folder that can be written), so a
bad option stops a program before it does any work, with one line that names
the option, the value and what it should be.
"""
import argparse
import math
import os
import stat
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

    NaN and infinities are refused whatever the bounds: no option here means anything by them.
    """
    low, high = (float(end) for end in bounds[1:-1].split(","))
    low_open, high_open = bounds[0] == "(", bounds[-1] == ")"

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {noun} in {bounds}, got {text!r}") from None
        inside = (low < value if low_open else low <= value) and (value < high if high_open else value <= high)
        if not (math.isfinite(value) and inside):
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


def _kind(path, text):
    """"file", "folder", "other" or None (nothing there) for `path`; a path the system will not look up (a name
    too long, a loop of symbolic links, a link to nothing) is refused in one line."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        if os.path.islink(path):
            raise argparse.ArgumentTypeError(f"{text} is a symbolic link to {os.readlink(path)}, which is not "
                                             "there") from None
        return None
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot use {text}: {exc.strerror}") from None
    return "folder" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def input_file(text):
    """A `type=` function: a file that exists."""
    kind = _kind(_path(text), text)
    if kind != "file":
        what = {"folder": "is a folder, not a file", "other": "is not a regular file"}.get(kind)
        raise argparse.ArgumentTypeError(f"{text} {what}" if what else f"no file {text}")
    return text


def input_folder(text):
    """A `type=` function: a folder that exists."""
    kind = _kind(_path(text), text)
    if kind != "folder":
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder" if kind else f"no folder {text}")
    return text


def _writable_place(path, text):
    """The nearest existing folder above `path`, once it is a folder that can be written (the rest can be made)."""
    ancestor = path.parent
    while (kind := _kind(ancestor, str(ancestor))) is None:
        ancestor = ancestor.parent
    if kind != "folder":
        raise argparse.ArgumentTypeError(f"cannot make {text}: {ancestor} is a file")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text}: {ancestor} is not writable")
    return ancestor


# A checkpoint folder's siblings (.NAME.tmp, .NAME.prev, .NAME.lock) are its name and this much more.
_SIBLING_EXTRA = len("..prev")


def output_folder(text):
    """A `type=` function: a folder that is there or can be made, and whose parent can be written.

    The parent must be writable as well, because a checkpoint is written beside
    the folder (under the folder's name and a few characters more, which must
    fit the file system's limit on a name) and then takes its place; and the
    folder must not hold the current working directory, which that replacement
    would pull from under it.
    """
    path = _path(text).absolute()
    kind = _kind(path, text)
    if kind not in (None, "folder"):
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    if Path.cwd().resolve().is_relative_to(path.resolve()):
        raise argparse.ArgumentTypeError(f"{text} is the current folder or holds it; "
                                         "give the checkpoints a folder of their own, e.g. out")
    ancestor = _writable_place(path, text)
    name = Path(os.path.realpath(path)).name
    longest = os.pathconf(ancestor, "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
    if len(os.fsencode(name)) + _SIBLING_EXTRA > longest:
        raise argparse.ArgumentTypeError(
            f"the folder's name is {len(os.fsencode(name))} bytes long; a save writes .NAME.tmp beside it, "
            f"{_SIBLING_EXTRA} bytes more, and this file system allows {longest} in a name: choose a shorter one")
    if kind == "folder" and not os.access(path, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text}: {path} is not writable")
    return text


def output_file(text):
    """A `type=` function: a file that can be written (it need not exist; missing folders above it are made)."""
    path = _path(text).absolute()
    if _kind(path, text) == "folder":
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name")
    _writable_place(path, text)
    return text

