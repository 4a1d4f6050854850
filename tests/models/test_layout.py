"""models/ is three packages (lessons, gpt, training) and front doors: each short name is the real module itself."""
import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import models
from models import doors

MODELS = Path(models.__file__).resolve().parent
FAMILIES = sorted(p.parent.name for p in MODELS.glob("*/__init__.py"))
SHARED = {"cli", "numbers", "io", "interrupts", "doors"}


def front_doors():
    """{short name: the real dotted name} for every front-door file in models/, read from its front_door call."""
    doors = {}
    for path in sorted(MODELS.glob("*.py")):
        calls = [node for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "front_door"]
        if calls:
            doors[f"models.{path.stem}"] = calls[0].args[1].value
    return doors


DOORS = front_doors()
# what DESIGN.md fixes and the README's commands use
DOCUMENTED = {"bigram", "softmax", "tiny", "neuron", "moons", "troubleshoot", "newton", "gpt2", "gpt2_params", "tokenizer",
              "train", "sample", "prepare", "eval", "export_merged"}


def test_models_has_three_packages_its_shared_helpers_and_front_doors_only():
    assert FAMILIES == ["gpt", "lessons", "training"]
    assert "__path__" not in (MODELS / "__init__.py").read_text()
    top = {p.stem for p in MODELS.glob("*.py")} - {"__init__"}
    assert top == SHARED | {name.split(".")[1] for name in DOORS}
    assert {name.split(".")[1] for name in DOORS} >= DOCUMENTED


def test_each_family_lists_every_module_it_holds():
    for family in FAMILIES:
        listing = importlib.import_module(f"models.{family}").__doc__
        for path in (MODELS / family).glob("*.py"):
            if path.stem != "__init__":
                # a line of its own, indented or not: Python 3.13 strips a docstring's common indent as it compiles
                assert re.search(rf"^\s*{path.stem} ", listing, re.MULTILINE), (family, path.stem)


@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_front_door_is_the_real_module_itself(door):
    real = DOORS[door]
    assert real == f"models.{real.split('.')[1]}.{door.split('.')[1]}"  # the same name, in its family
    code = (f"import {door}, {real}, sys; assert {door} is {real} is sys.modules[{door!r}] is sys.modules[{real!r}];"
            f"import importlib; assert importlib.import_module({door!r}) is {real}")
    subprocess.run([sys.executable, "-c", code], cwd=MODELS.parent, check=True)


def test_an_object_made_through_either_name_is_the_same_class():
    from models.gpt.tokenizer import CharTokenizer
    from models.tokenizer import CharTokenizer as ByTheDoor
    assert ByTheDoor is CharTokenizer and isinstance(ByTheDoor("ab"), CharTokenizer)


@pytest.mark.parametrize("door", sorted(DOORS))
def test_python_dash_m_through_a_front_door_runs_the_real_main(door):
    result = subprocess.run([sys.executable, "-m", door, "--help"], capture_output=True, text=True,
                            cwd=MODELS.parent)
    if not hasattr(importlib.import_module(DOORS[door]), "main"):
        assert (result.returncode, result.stderr) == (1, f"{DOORS[door]} is a library with no command line: "
                                                         "import it (see its docstring)\n")
        return
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: python -m {door}"), result.stdout[:200]


@pytest.mark.parametrize("door", ["models.neuron", "models.softmax"])
def test_output_to_a_reader_that_has_gone_ends_quietly(door):
    """`python -m models.tiny | head` stops reading early; the lesson stops without a BrokenPipeError traceback
    (or, its output still buffered, Python's "Exception ignored" at exit). Here the reader is gone from the start."""
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([sys.executable, "-m", door], stdout=write, stderr=subprocess.PIPE, text=True,
                                cwd=MODELS.parent, timeout=120)
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_broken_pipe_that_is_not_stdout_is_still_an_error(monkeypatch):
    def main():
        raise BrokenPipeError(32, "Broken pipe")  # a worker's pipe, say: stdout itself is fine
    monkeypatch.setitem(sys.modules, "fake_command", type(sys)("fake_command"))
    sys.modules["fake_command"].main = main
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # front_door installs the Ctrl-C hook
    with pytest.raises(BrokenPipeError):
        doors.front_door("__main__", "fake_command")


def test_python_dash_m_runs_a_command_to_its_end():
    out = subprocess.run([sys.executable, "-m", "models.gpt2_params"], capture_output=True, text=True,
                         cwd=MODELS.parent, check=True).stdout
    assert "124,439,808" in out


def test_a_command_started_without_stdout_ends_quietly():
    """`python -m models.gpt2_params >&-`: Python gives such a program sys.stdout = None and drops its prints, but
    the front door's flush of sys.stdout ended it in an AttributeError traceback."""
    result = subprocess.run([sys.executable, "-m", "models.gpt2_params"], stderr=subprocess.PIPE, text=True,
                            cwd=MODELS.parent, timeout=120, preexec_fn=lambda: os.close(1))
    assert (result.returncode, result.stderr) == (0, "")
