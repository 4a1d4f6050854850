"""The switches table (autograd/switches.py, docs/switches.md) against what the code reads."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autograd import switches

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("autograd", "nn", "models", "viz", "benchmarks")
NAME = re.compile(r"""["']((?:AUTOGRAD|GPT)_[A-Z0-9_]+)["']""")


def sources():
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]


def test_every_switch_the_code_names_is_in_the_table():
    named = {(path.relative_to(ROOT).as_posix(), name) for path in sources() for name in NAME.findall(path.read_text())}
    assert named, "the search found no switch at all"
    missing = sorted((path, name) for path, name in named if name not in switches.SWITCHES)
    assert not missing, f"switches read but not in autograd/switches.py: {missing}"


def test_only_the_switches_module_reads_them_from_the_environment():
    """Reading: environ.get, getenv, `in environ` or environ[...] not assigned to; the benchmarks may set a switch
    for the code they run (environ["AUTOGRAD_FUSED"] = ...)."""
    switch = r"""["'](?:AUTOGRAD|GPT)_[A-Z0-9_]+["']"""
    reading = re.compile(rf"(?:environ\.get|getenv)\(\s*{switch}|{switch}\s+(?:not\s+)?in\s+(?:os\.)?environ"
                         rf"|environ\[{switch}\](?!\s*=[^=])")
    readers = [path.relative_to(ROOT).as_posix() for path in sources()
               if path.name != "switches.py" and reading.search(path.read_text())]
    assert readers == []


def test_the_docs_table_lists_each_switch_with_its_default_and_when_it_is_read():
    rows = {}
    for line in (ROOT / "docs" / "switches.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| `"):
            rows[cells[0].strip("`")] = cells[1:]
    assert rows == {name: [s.default, s.read, s.does] for name, s in switches.SWITCHES.items()}


def test_an_unknown_switch_is_refused_by_name():
    with pytest.raises(KeyError, match="AUTOGRAD_FUSSED is not one of the project's switches"):
        switches.read("AUTOGRAD_FUSSED")


@pytest.mark.parametrize("name, value", [("AUTOGRAD_FUSED", "off"), ("AUTOGRAD_SHARED_POOL", "no"),
                                         ("AUTOGRAD_KEEP_FREED_MEMORY", "true"), ("GPT_DECODE", "fast")])
def test_a_value_a_switch_does_not_take_is_refused_by_name(monkeypatch, name, value):
    """AUTOGRAD_FUSED=off once left the kernels on without a word: only "0" turned them off."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=rf"^{name}='{value}' is not one of {', '.join(switches.SWITCHES[name].values)} "
                                         r"\(docs/switches.md\); set one of those, or unset it$"):
        switches.read(name)


def test_a_bad_switch_read_at_import_ends_a_command_in_one_line():
    run = subprocess.run([sys.executable, "-m", "models.train", "--help"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "AUTOGRAD_KEEP_FREED_MEMORY": "true"}, timeout=120)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr == ("train: error: AUTOGRAD_KEEP_FREED_MEMORY='true' is not one of 0, 1 (docs/switches.md); "
                          "set one of those, or unset it\n")
