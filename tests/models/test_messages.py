"""What the commands print for a user reading a terminal or a log: no bar frames in a pipe, no Python None in resume's
line, no change announced and then refused, counts with thousands separators, no stale anomaly picture."""
import sys
from pathlib import Path

import pytest

from models.training import eval as evaluate
from models.training import prepare, train

TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "64",
        "--eval-interval", "2", "--eval-iters", "1", "--warmup-iters", "1", "--lr-decay-iters", "8",
        "--peak-tflops", "1", "--no-progress", "--sample-tokens", "0"]
SHIPPED = Path(__file__).resolve().parents[2] / "models" / "corpus" / "tinyshakespeare.txt"
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll:\nSpeak, speak.\n" * 40


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The shipped corpus prepared, and a 2-iteration checkpoint trained on its text (the default --data):
    (folder, data, out)."""
    folder = tmp_path_factory.mktemp("messages")
    (folder / "text.txt").write_text(TEXT, encoding="utf-8")
    assert prepare.main([str(SHIPPED), "--out", str(folder / "data"), "--tokenizer", "char", "--no-progress"]) == 0
    assert train.main([*TINY, "--max-iters", "2", "--out-dir", str(folder / "out")]) == 0
    return folder, folder / "data", folder / "out"


@pytest.mark.parametrize("tty", [False, True])
def test_prepare_and_eval_draw_a_bar_only_on_a_terminal(run, tmp_path, capsys, monkeypatch, tty):
    folder, data, out = run
    capsys.readouterr()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty)
    assert prepare.main([str(folder / "text.txt"), "--out", str(tmp_path / "d"), "--tokenizer", "char"]) == 0
    assert evaluate.main([str(out), "--data", str(data), "--max-tokens", "1000"]) == 0
    err = capsys.readouterr().err
    assert ("\r" in err) == tty and ("tokenizing" in err) == tty, err


def test_resume_names_a_default_and_a_change_as_typed(run, capsys):
    folder, data, out = run
    capsys.readouterr()
    assert train.main(["--resume", "--out-dir", str(out), "--data", str(data), "--max-iters", "2"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith(f"resume: the command line changes --data (default) → {data}; "), line
    assert "None" not in line


def test_resume_with_a_preset_refuses_its_block_size_before_announcing_anything(run, capsys):
    out = run[2]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--resume", "--preset", "shakespeare-char", "--out-dir", str(out)])
    assert exit_info.value.code == 2
    printed = capsys.readouterr()
    assert "resume: the command line changes" not in printed.out
    assert printed.err == (f"python -m models.train: error: --block-size 256 exceeds the block_size 16 of the "
                           f"checkpoint's model in {out}, which it fixes; resume with --block-size 16 or less "
                           "(see --help)\n")


def test_the_data_line_writes_its_counts_with_separators(run, tmp_path, capsys):
    assert train.main([*TINY, "--max-iters", "0", "--out-dir", str(tmp_path / "o"), "--data", str(run[1])]) == 0
    data_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("data: "))
    assert "; 1,024 tokens per iteration; peak 1,000.0 GFLOP/s for MFU" in data_line, data_line


def test_a_healthy_save_leaves_the_stopped_runs_anomaly_pictures_behind(run, tmp_path, capsys):
    out = tmp_path / "o"
    assert train.main([*TINY, "--max-iters", "2", "--out-dir", str(out), "--data", str(run[1])]) == 0
    (out / "anomaly_graph.svg").write_text("<svg/>")  # as a --detect-anomaly run that stopped leaves it
    (out / "anomaly_trace.html").write_text("<html/>")
    assert train.main(["--resume", "--max-iters", "4", "--out-dir", str(out), "--always-save"]) == 0
    assert "saved" in capsys.readouterr().out
    assert not (out / "anomaly_graph.svg").exists() and not (out / "anomaly_trace.html").exists()
    assert (out / "loss.png").is_file()
