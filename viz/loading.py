"""The module a viz command names, loaded: `model.bigram` means models.bigram, `models/lessons/bigram.py` its real path.

`demo_loss_of(name)` imports it and returns the scalar loss of its
`demo_loss()` (a scalar Tensor, or a Value for chapter one's neuron), the
graph that `python -m viz.graph` draws and
`python -m viz.trace` prints; `demo_of(name)` returns the function itself, for
`python -m viz.diverge`, which runs it more than once. A name that cannot be
used raises ModuleError, whose one line says what to pass instead.
"""
import importlib
import importlib.util
import os
from pathlib import Path

from autograd import Tensor, Value


class ModuleError(ValueError):
    """A module name a viz command cannot draw from; the message says what to pass instead."""


def module_name(name):
    """The importable dotted name for what a user typed: `model.bigram` means `models.bigram` (a front door, the same
    module as models.lessons.bigram), and a file's path its dotted path."""
    name = name.strip()
    if name.endswith(".py") or os.sep in name or "/" in name:
        name = os.path.normpath(name[:-3] if name.endswith(".py") else name)
        name = name.replace(os.sep, ".").replace("/", ".").lstrip(".")
    if name == "model" or name.startswith("model."):
        name = "models" + name[len("model"):]
    return name


def demo_of(name):
    """Import module `name` (see module_name): (dotted name, its demo_loss function); errors say what to do.
    A .py file outside the current folder (your own model, by its path) is loaded from that file."""
    file, here = Path(name.strip()), Path.cwd().resolve()
    if file.suffix == ".py" and file.is_file():
        if not file.resolve().is_relative_to(here):
            return file.stem, _demo_in(_load_file(file), file.stem)
        name = str(file.resolve().relative_to(here))  # a package's file: imported by its dotted name
    dotted = module_name(name)
    if not dotted or dotted.startswith("."):
        raise ModuleError(f"cannot import {name!r}: pass a dotted module name such as models.bigram, or a .py file's "
                         "path")
    try:
        module = importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        if exc.name and dotted.startswith(exc.name):
            raise ModuleError(
                f"cannot import {dotted!r} ({exc}). Pass a dotted module name such as models.bigram "
                "and run from the repository root (or pip install -e . first).") from None
        raise
    return dotted, _demo_in(module, dotted)


def _load_file(file):
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _demo_in(module, dotted):
    demo = getattr(module, "demo_loss", None)
    if demo is None:
        raise ModuleError(f"module {dotted} has no demo_loss(); every model module defines "
                         "demo_loss() -> Tensor, the scalar loss of a small fixed batch (or a Value)")
    return demo


def demo_loss_of(name):
    """Import module `name` (see module_name) and run its demo_loss(): (dotted name, loss); errors say what to do."""
    dotted, demo = demo_of(name)
    loss = demo()
    if isinstance(loss, Value):  # chapter one's scalar engine: its graph is always one number's
        return dotted, loss
    if not isinstance(loss, Tensor) or loss.data.size != 1:
        raise ModuleError(f"{dotted}.demo_loss() must return a scalar Tensor, got {loss!r:.200}")
    if not loss.requires_grad:
        raise ModuleError(f"{dotted}.demo_loss() returned a tensor that does not require grad: "
                         "there is no backward graph to show")
    return dotted, loss
