"""models/ shows its three families as folders, and every module keeps its short name (models.bigram, models.train)."""
import importlib
import subprocess
import sys
from pathlib import Path

import models

MODELS = Path(models.__file__).resolve().parent
FAMILIES = {"lessons": {"bigram", "softmax", "tiny", "neuron", "value_nn", "moons"},
            "gpt": {"gpt2", "gpt2_params", "hf_checkpoint", "sampling", "tokenizer"},
            "training": {"train", "sample", "checkpoint", "parallel", "data"}}
SHARED = {"cli", "numbers", "io", "interrupts"}


def modules_in(folder):
    return {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}


def test_each_family_is_a_folder_and_no_name_occurs_twice():
    found = {family: modules_in(MODELS / family) for family in FAMILIES}
    assert all(found[family] >= expected for family, expected in FAMILIES.items()), found
    names = [name for family in found for name in found[family]] + sorted(modules_in(MODELS))
    assert len(names) == len(set(names)), names  # a short name must say which file it is
    assert modules_in(MODELS) == SHARED


def test_a_module_is_imported_once_under_its_short_name_from_its_family_folder():
    for family, names in FAMILIES.items():
        for name in names:
            module = importlib.import_module(f"models.{name}")
            assert Path(module.__file__).resolve() == MODELS / family / f"{name}.py"


def test_python_dash_m_finds_a_module_in_its_family_folder():
    out = subprocess.run([sys.executable, "-m", "models.gpt2_params"], capture_output=True, text=True,
                         cwd=MODELS.parent, check=True).stdout
    assert "124,439,808" in out
