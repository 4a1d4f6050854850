"""Fixtures the model tests share."""
import random

import pytest

import autograd as ag
from models.gpt.gpt2 import GPT, GPTConfig
from models.gpt.tokenizer import CharTokenizer
from models.training import checkpoint


@pytest.fixture
def small_text(tmp_path):
    """A 4,000-character text of nine letters and newlines: training data that tokenises in no time."""
    path = tmp_path / "data.txt"
    letters = random.Random(0)
    path.write_text("".join(letters.choice("abcdefgh \n") for _ in range(4000)), encoding="utf-8")
    return path


def random_gpt2_folder(root, text, n_layer):
    """root/text.txt holding `text`, and root/base: a random GPT-2 folder with `text`'s character tokenizer, as a
    user's pretrained model stands in for here."""
    (root / "text.txt").write_text(text)
    tokenizer = CharTokenizer(text)
    with ag.seeded(0):
        model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=32, n_layer=n_layer, n_head=2, n_embd=16))
    model.save_pretrained(root / "base")
    checkpoint.write_tokenizer(root / "base", tokenizer, 32)
    return root
