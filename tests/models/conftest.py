"""Fixtures the model tests share."""
import random

import pytest


@pytest.fixture
def small_text(tmp_path):
    """A 4,000-character text of nine letters and newlines: training data that tokenises in no time."""
    path = tmp_path / "data.txt"
    letters = random.Random(0)
    path.write_text("".join(letters.choice("abcdefgh \n") for _ in range(4000)), encoding="utf-8")
    return path
