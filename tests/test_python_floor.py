"""The oldest Python that pyproject.toml promises (requires-python; the README's quick start) parses every source.

Development runs a newer Python, whose grammar takes what the floor's refuses. ast.parse's feature_version is best
effort: it refuses `except*` (3.11) and PEP 695's type parameters (3.12) on any Python; a 3.11 parser refuses
f-strings reusing their quote (3.12) by itself. Warnings are errors, so an invalid escape sequence ("\\d"), which
3.12 warns of at every compile, fails too.
"""
import ast
import json
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def floor():
    """(3, 10) from requires-python = ">=3.10" (read as text: tomllib is 3.11's)."""
    found = re.search(r'^requires-python = ">=(\d+)\.(\d+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    return int(found[1]), int(found[2])


def sources():
    """Each Python file of the project and each notebook's code, as (name, text)."""
    for folder in ["autograd", "nn", "models", "viz", "tests", "benchmarks"]:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        yield str(path.relative_to(ROOT)), "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def refused_at(version, text):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            ast.parse(text, feature_version=version)
        except SyntaxError as error:
            return f"line {error.lineno}: {error.msg}"
    return None


def test_every_source_parses_with_the_grammar_of_the_oldest_python_promised():
    assert floor() == (3, 10)
    refused = {name: why for name, text in sources() if (why := refused_at(floor(), text))}
    assert refused == {}


@pytest.mark.parametrize("text", ["try:\n    pass\nexcept* ValueError:\n    pass\n", "def first[T](xs: list[T]): pass\n",
                                  'digits = "\\d+"\n'], ids=["except-star", "type-parameters", "invalid-escape"])
def test_the_check_refuses_what_3_10_cannot_run(text):
    assert refused_at((3, 10), text) is not None
