"""The command lines' argument parser: argparse, but a mistake costs one line, not the whole usage.

Values are checked as they are parsed, by the `type=` functions below (a range,
a device that works, a file that exists, a folder that can be written), so a
bad option stops a program before it does any work, with one line that names
the option, the value and what it should be. An option it does not know gets a
hint (nanoGPT's `--max_iters=10`: did you mean --max-iters?), and `--help`
shows every option's default once, as the option would be typed.
"""
import argparse
import copy
import difflib
import os
import re
import stat
import sys
import tempfile
import textwrap
from pathlib import Path

_NOT_GIVEN = object()
# What Python 3.10's argparse.BooleanOptionalAction appends to its help (3.11 no longer does): a switch says nothing
_SWITCH_DEFAULT = " (default: %(default)s)"


class HelpFormatter(argparse.HelpFormatter):
    """Every option that takes a value ends its help with its one default: "(default: 0.1)".

    A help text that says "(default: …)" itself explains what its default means
    (a None that stands for "the shipped text", say) and gets nothing more. A
    string shows as typed, or quoted where it would not read plainly ('\\n').
    Switches (--no-bias) are off unless given, and say nothing; nor does an option
    that must be given (a default it never has would mislead). Lines are never
    broken inside an option's name (--lr-decay-iters).
    """

    def _split_lines(self, text, width):
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text, width, indent):
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False)

    def _format_action(self, action):
        if action.nargs == 0 and (action.help or "").endswith(_SWITCH_DEFAULT):
            action = copy.copy(action)
            action.help = action.help.removesuffix(_SWITCH_DEFAULT)
        if action.help != argparse.SUPPRESS and action.nargs != 0 and action.default is not argparse.SUPPRESS \
                and not action.required and "(default: " not in (action.help or "") \
                and (action.option_strings or action.nargs in ("?", "*")):
            action = copy.copy(action)
            shown = show_default(action.default).replace("%", "%%")  # help texts are %-formatted
            action.help = f"{action.help} (default: {shown})" if action.help else f"(default: {shown})"
        return super()._format_action(action)


def show_default(value):
    """`value` as `--help` shows it: None as "none", a list as its items, a string quoted where it would not read."""
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return " ".join(show_default(v) for v in value)
    if isinstance(value, str) and not (value and value.isprintable() and value == value.strip()):
        return repr(value)
    return str(value)


class Parser(argparse.ArgumentParser):
    """argparse's parser with the HelpFormatter, one-line errors and hints for unrecognized options.

    `renamed` maps another program's spelling of an option (nanoGPT's
    "--learning-rate", underscores as dashes) to this one's ("--lr") for the hints.
    """

    def __init__(self, prog, description, renamed=None, **kwargs):
        super().__init__(prog=prog, description=description, formatter_class=HelpFormatter, **kwargs)
        self.renamed = renamed or {}
        self._argv = []  # the words parse_args reads, for error's hint on a value starting with "-"
        # argparse reads a word as a negative number, a value, only as -1 or -.5: -1e308, -1E-5 and -inf were
        # taken for options (`--z 1e308 -1e308`: "unrecognized arguments"); any number is a value here
        self._negative_number_matcher = re.compile(r"-(\.?\d|inf(inity)?$|nan$)", re.IGNORECASE)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}{self._dash_hint(message)} (see --help)\n")

    def parse_args(self, args=None, namespace=None):
        """argparse's, but an unrecognized option gets a hint: the option it was probably meant to be."""
        self._argv = list(sys.argv[1:] if args is None else args)
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._hint(extras)}")
        return namespace

    def _dash_hint(self, message):
        """What follows argparse's "argument --prompt: expected one argument" when the value given starts with "-"
        but names no option and is no number (--prompt -x): argparse took it for one; nothing otherwise."""
        flag = message.removeprefix("argument ").removesuffix(": expected one argument")
        argv = self._argv
        if flag == message or flag not in argv[:-1]:
            return ""
        value = argv[argv.index(flag) + 1]
        if not value.startswith("-") or any(known.startswith(value.split("=", 1)[0])
                                            for known in self._option_string_actions):
            return ""  # a missing value: the next word is an option (or argparse's abbreviation of one)
        return f"; {value!r} starts with '-', so it was read as an option: write {flag}={value} to give it as the value"

    def _hint(self, extras):
        """What follows the unrecognized `extras` in the error: "; did you mean --max-iters?" for nanoGPT's
        --max_iters=10 (underscores for dashes) or for a near miss; nothing when no option is close."""
        known = [flag for action in self._actions for flag in action.option_strings if flag.startswith("--")]
        guesses = []
        for extra in extras:
            if not extra.startswith("-"):
                continue  # a value, or a stray word
            name = "--" + extra.split("=", 1)[0].lstrip("-").replace("_", "-")
            name = self.renamed.get(name, name)
            close = [name] if name in known else difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            if close:
                guesses.append((extra, close[0]))
        if not guesses:
            return ""
        if sum(extra.startswith("-") for extra in extras) == 1:
            return f"; did you mean {guesses[0][1]}?"
        return "; did you mean " + ", ".join(f"{flag} for {extra}" for extra, flag in guesses) + "?"

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


def counted(n, noun, plural=None):
    """`n` and its noun, in the plural (noun + "s" unless given) where n is not 1: "1 step", "2 steps"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def machine_memory():
    """This machine's memory in bytes (os.sysconf, else /proc/meminfo), or None where neither says."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        pass
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def within_memory(parse, bytes_each, per):
    """A `type=` function: `parse`'s count (an `interval`), refused where the run it asks for, about `bytes_each`
    bytes `per` one of it ("a point"), would need more than this machine's memory (machine_memory), before any
    of it is allocated; the fix is the most that fit."""

    def check(text):
        value = parse(text)
        available = machine_memory()
        if available is not None and value * bytes_each > available:
            raise argparse.ArgumentTypeError(
                f"{text} would need about {value * bytes_each / 2 ** 30:,.1f} GiB of memory ({bytes_each:,} bytes "
                f"{per}), more than this machine's {available / 2 ** 30:,.1f} GiB; give at most "
                f"{available // bytes_each:,}")
        return value

    return check


def shows_progress(no_progress):
    """Whether a command draws a progress bar: not under --no-progress, nor where stderr is no terminal (a log
    file, a pipe, mpiexec), which would keep each of the bar's redraws as a line of its own."""
    return not no_progress and sys.stderr.isatty()


SEEDS = "[0, 4294967295]"  # the seeds NumPy's generators take: `--seed`'s interval(int, SEEDS)


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


def input_path(text):
    """A `type=` function: a file or a folder that exists (not a FIFO or a device, whose reading may never end)."""
    kind = _kind(_path(text), text)
    if kind is None:
        raise argparse.ArgumentTypeError(f"no file or folder {text}")
    if kind == "other":
        raise argparse.ArgumentTypeError(f"{text} is not a regular file (a FIFO or a device); give text files or "
                                         "folders")
    return text


def input_folder(text):
    """A `type=` function: a folder that exists."""
    kind = _kind(_path(text), text)
    if kind != "folder":
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder" if kind else f"no folder {text}")
    return text


# What nanoGPT's --init_from=gpt2 (-medium, -large, -xl) downloads: the Hugging Face hub's copies of OpenAI's weights.
GPT2_HUB_NAMES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")


def hub_name(text):
    """A `type=` function: `text` as given, unless it is one of GPT-2's names with no such folder here.

    Nothing here downloads: `--init-from gpt2` means a folder named gpt2, and
    where there is none the one line says how to fetch one on a machine with
    internet and bring it here.
    """
    if text not in GPT2_HUB_NAMES or Path(text).exists():
        return text
    raise argparse.ArgumentTypeError(
        f"no folder {text}; nothing is downloaded here, so on a machine with internet run "
        f"`hf download openai-community/{text} config.json model.safetensors --local-dir {text}` "
        f"(or transformers' GPT2LMHeadModel.from_pretrained('{text}').save_pretrained('{text}')), "
        f"then copy the folder {text} here")


def _writable_place(path, text):
    """The nearest existing folder above `path`, once it is a folder that takes a new file (the rest can be made)."""
    ancestor = path.parent
    while (kind := _kind(ancestor, str(ancestor))) is None:
        ancestor = ancestor.parent
    if kind != "folder":
        raise argparse.ArgumentTypeError(f"cannot make {text}: {ancestor} is a file")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text}: {ancestor} is not writable")
    try:  # a folder that root's os.access passes may still take no file (/proc, /sys, a read-only mount)
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=ancestor)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot write {text}: {ancestor} takes no new file "
                                         f"({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)
    return ancestor


# A checkpoint folder's siblings (.NAME.tmp, .NAME.prev, .NAME.lock) are its name and this much more.
_SIBLING_EXTRA = len("..prev")


def folder_path(text):
    """A `type=` function: a folder, or a path with nothing there yet; neither need be writable (output_folder
    checks that where the command writes)."""
    if _kind(_path(text).absolute(), text) not in (None, "folder"):
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    return text


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
                                         "give what it writes a folder of its own, e.g. out")
    ancestor = _writable_place(path, text)
    name = Path(os.path.realpath(path)).name
    longest = os.pathconf(ancestor, "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
    if len(os.fsencode(name)) + _SIBLING_EXTRA > longest:
        raise argparse.ArgumentTypeError(
            f"the folder's name is {len(os.fsencode(name))} bytes long; a run writes .NAME.lock beside it, "
            f"{_SIBLING_EXTRA} bytes more, and this file system allows {longest} in a name: choose a shorter one")
    if kind == "folder" and not os.access(path, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text}: {path} is not writable")
    return text


def output_file(text):
    """A `type=` function: a file that can be written (it need not exist; missing folders above it are made).

    A device or a pipe (/dev/null) is written in place (models.io.atomic_path), so it
    must be writable itself; a file is written beside its name and moved there, so
    its folder must be (a symbolic link's: that of the file it names, which is replaced)."""
    path = _path(text).absolute()
    kind = _kind(path, text)
    if kind == "folder":
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name")
    if kind == "other":
        if not os.access(path, os.W_OK):
            raise argparse.ArgumentTypeError(f"cannot write {text}: it is not writable")
        return text
    _writable_place(Path(os.path.realpath(path)), text)
    return text

