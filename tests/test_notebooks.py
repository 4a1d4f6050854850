"""Every notebook in notebooks/ runs top to bottom, its graphs render, and its exercise is graded.

Each lesson notebook ends with an exercise: a starter with a deliberate mistake
(the grader must reject it, showing why) and one answer (the grader must accept
it). Executing them here is what keeps them from rotting.
"""
import json
import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason='pip install -e ".[dev]" (nbformat, nbclient, ipykernel)')
nbclient = pytest.importorskip("nbclient", reason='pip install -e ".[dev]" (nbformat, nbclient, ipykernel)')

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# What each notebook's grader prints for the starter (rejected) and for the answer (accepted).
GRADED = {
    "lesson000_bigram_softmax.ipynb": ("backward() disagrees with finite differences", "correct: backward matches"),
    "tiny_transformer.ipynb": ("backward() disagrees with finite differences",
                               "correct: backward matches finite differences; ∂L/∂logit(你) = -0.915193"),
    "gpt2_kv_cache.ipynb": ("not yet: differs from the full attention", "correct\n"),
    "troubleshoot.ipynb": ("not yet: backward() disagrees with finite differences",
                           "correct: backward matches finite differences"),
}


def test_every_lesson_has_its_notebook():
    assert [p.name for p in NOTEBOOKS] == sorted(GRADED)


def outputs_of(notebook):
    text, kinds = [], set()
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            kinds.update(output.get("data", {}))
            text.append(output.get("text", "") + json.dumps(output.get("data", {}).get("text/plain", "")))
    return "\n".join(text), kinds


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_grades_its_exercise(path):
    notebook = nbformat.read(path, as_version=4)
    assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), \
        f"{path.name} is committed with outputs; clear them (CI runs it anyway)"
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()  # raises CellExecutionError, naming the cell, if any cell fails
    text, kinds = outputs_of(notebook)
    rejected, accepted = GRADED[path.name]
    assert text.count(rejected) == 1 and text.count(accepted) == 1  # the starter once, then the answer once
    if shutil.which("dot"):
        assert "image/svg+xml" in kinds, f"{path.name}: no graph rendered inline"
