"""The failure lesson: each of its three failures is named by the tools, in the lines the lesson prints."""
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest

from models.lessons import troubleshoot
from models.training import health
from models.gpt.gpt2 import GPT, GPTConfig
import autograd as ag


@pytest.fixture(scope="module")
def printed(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("troubleshoot")
    lines = []
    error = troubleshoot.lr_too_high(out=lines.append)
    warnings = troubleshoot.init_too_large(out_dir, out=lines.append)
    ratios = troubleshoot.sign_error(out=lines.append)
    return "\n".join(lines), error, warnings, ratios, out_dir


def lr_story(text, error):
    """What the lesson's first failure must show, whatever the rounding: the two-op loss's NaN, the backward of Log
    named, at a step before it, for a probability that underflowed below float32's normal numbers; and the fused
    cross-entropy lasting longer."""
    nan_step = int(re.search(r"the loss became nan at step (\d+): stopped", text)[1])
    lines = str(error).splitlines()
    named = re.fullmatch(r"detect_anomaly: backward of Log \(step \d+ of backward\) returned NaN/inf as the "
                         r"gradient for x at step (\d+)", lines[0])
    assert named and int(named[1]) == nan_step - 1, lines[0]
    assert lines[1:3] == ["  op: Log, rule dx = g/x",
                          "  module: (none: the top module's own forward, or outside any module)"]
    assert re.fullmatch(r"  forward call: \S*models/lessons/troubleshoot\.py:\d+ in two_op_loss: return "
                        r"-p\[np\.arange\(B \* T\), y\.reshape\(-1\)\]\.log\(\)\.mean\(\)", lines[3]), lines[3]
    assert "← first non-finite: g and the inputs are finite" in lines[-1]
    assert error.anomaly.phase == "backward" and error.anomaly.op.name == "Log"
    assert float(re.search(r"input x: shape \(256,\) float32, min (\S+),", str(error))[1]) < np.finfo(np.float32).tiny
    assert int(re.search(r"the same run lasts (\d+) steps more", text)[1]) > 0


def test_lr_too_high_is_named_by_detect_anomaly(printed):
    text, error, _, _, _ = printed
    lr_story(text, error)


def test_the_lr_story_holds_however_the_arithmetic_rounds(monkeypatch):
    """Another machine's, or the composed ops', rounding stands in as a relative nudge of 1e-6 to every initial
    weight: the first failure is the same story (a nudge of this size moved the culprit of the fused loss's
    overflow between Linear and attention)."""
    made = troubleshoot.make_model

    def nudged(vocab_size, init_scale=1.0):
        model = made(vocab_size, init_scale)
        rng = np.random.default_rng(7)
        for p in model.parameters():
            p.data *= (1 + 1e-6 * rng.standard_normal(p.data.shape)).astype(p.data.dtype)
        return model
    monkeypatch.setattr(troubleshoot, "make_model", nudged)
    lines = []
    error = troubleshoot.lr_too_high(out=lines.append)
    lr_story("\n".join(lines), error)
    lines = []
    monkeypatch.setenv("AUTOGRAD_FUSED", "0")
    error = troubleshoot.lr_too_high(out=lines.append)
    lr_story("\n".join(lines), error)


def test_init_too_large_is_named_by_the_health_report(printed):
    text, _, warnings, _, out_dir = printed
    assert [w.split(":")[1] for w in warnings] == [" h.0", " h.1"]
    assert all("of GELU inputs below -3 for 10 iterations: the initialisation is likely too large" in w
               for w in warnings)
    assert (out_dir / "health.png").is_file() and (out_dir / "health.jsonl").is_file()
    # the files named once, by the health monitor, where the learner reads where they went
    assert text.count("health.png") == 1
    assert f"wrote the health report to {out_dir / 'health.jsonl'} and {out_dir / 'health.png'}" in text


def test_the_sign_error_is_named_by_gradcheck_and_located_by_descent_check(printed):
    text, _, _, ratios, _ = printed
    assert "not yet: backward() disagrees with finite differences\ngradcheck: backward() disagrees" in text
    assert [health.layer_name(n) for n, r in ratios.items() if r < 0] == ["h.1.mlp.c_fc"]
    assert ratios["transformer.h.1.mlp.c_fc.weight"] == pytest.approx(-1, abs=0.01)
    assert ratios["transformer.h.1.mlp.c_proj.weight"] == pytest.approx(1, abs=0.01)
    assert "h.1.mlp.c_fc's gradient points uphill, h.1.mlp.c_proj's just after it is right" in text


def test_descent_check_is_one_for_a_right_gradient():
    ag.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8))
    rng = np.random.default_rng(0)
    ratios = health.descent_check(model, rng.integers(0, 11, (2, 8)), rng.integers(0, 11, (2, 8)))
    assert len(ratios) == 2 + 2 * 4  # the embeddings and each block's four matrices
    assert all(r == pytest.approx(1, abs=0.02) for r in ratios.values())
    assert all(p.grad is None for p in model.parameters())  # it leaves no gradient behind


def test_the_exercise_grader_accepts_gelu_itself():
    assert troubleshoot.grade(ag.ops.GELU) == "correct: backward matches finite differences"


def test_the_lesson_writes_into_a_temporary_folder_not_the_current_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    given = []
    monkeypatch.setattr(troubleshoot, "lr_too_high", lambda: None)
    monkeypatch.setattr(troubleshoot, "init_too_large", given.append)
    monkeypatch.setattr(troubleshoot, "sign_error", lambda: None)
    assert troubleshoot.main([]) == 0
    (out_dir,) = given
    assert out_dir.parent == Path(tempfile.gettempdir()) and out_dir.name.startswith("gptgrad-troubleshoot-")
    assert list(tmp_path.iterdir()) == []
    out_dir.rmdir()
    assert troubleshoot.main(["--out-dir", "mine"]) == 0
    assert given[1] == Path("mine")


def test_an_out_dir_that_cannot_be_a_folder_is_refused_before_the_lesson_runs(tmp_path, monkeypatch, capsys):
    """--out-dir '' ran the lesson into a new temporary folder, as if no --out-dir had been given."""
    (tmp_path / "notes").write_text("a file")
    monkeypatch.setattr(troubleshoot, "lr_too_high", lambda: pytest.fail("ran the lesson before checking --out-dir"))
    for given, why in ((tmp_path / "notes", f"argument --out-dir: {tmp_path / 'notes'} is a file, not a folder"),
                       (tmp_path / "notes" / "sub", f"--out-dir {tmp_path / 'notes' / 'sub'}: cannot make that "
                                                    "folder (Not a directory)"),
                       ("", "argument --out-dir: expected a path, got ''")):
        with pytest.raises(SystemExit) as exit_:
            troubleshoot.main(["--out-dir", str(given)])
        assert exit_.value.code == 2
        assert capsys.readouterr().err == f"python -m models.troubleshoot: error: {why} (see --help)\n"


@pytest.mark.parametrize("inside", ["", "lesson"])
def test_an_out_dir_in_a_checkpoint_is_refused_before_the_lesson_runs(tmp_path, monkeypatch, capsys, inside):
    """`--out-dir out` replaced the health report of the training run in out; `--out-dir out/lesson` made a folder
    that models.train then refused to save over."""
    run = tmp_path / "out"
    run.mkdir()
    for name, text in (("train_state.json", "{}"), ("health.jsonl", "the run's report\n")):
        (run / name).write_text(text)
    given = run / inside if inside else run
    monkeypatch.setattr(troubleshoot, "lr_too_high", lambda: pytest.fail("ran the lesson before checking --out-dir"))
    with pytest.raises(SystemExit) as exit_:
        troubleshoot.main(["--out-dir", str(given)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        f"python -m models.troubleshoot: error: --out-dir {given}: {run} holds a checkpoint or a prepared corpus, "
        "which the lesson's health.jsonl and health.png would change; give the lesson a folder of its own "
        "(see --help)\n")
    assert sorted(p.name for p in run.iterdir()) == ["health.jsonl", "train_state.json"]
    assert (run / "health.jsonl").read_text() == "the run's report\n"
