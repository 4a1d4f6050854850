"""The failure lesson: each of its three failures is named by the tools, in the lines the lesson prints."""
import numpy as np
import pytest

from models import health, troubleshoot
from models.gpt2 import GPT, GPTConfig
import autograd as ag


@pytest.fixture(scope="module")
def printed(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("troubleshoot")
    lines = []
    error = troubleshoot.lr_too_high(out=lines.append)
    warnings = troubleshoot.init_too_large(out_dir, out=lines.append)
    ratios = troubleshoot.sign_error(out=lines.append)
    return "\n".join(lines), error, warnings, ratios, out_dir


def test_lr_too_high_is_named_by_detect_anomaly(printed):
    text, error, _, _, _ = printed
    assert "the loss became nan at step 8: stopped" in text
    assert str(error).splitlines()[:3] == [
        "detect_anomaly: forward of Linear made NaN/inf at step 8",
        "  op: Linear, rule dx = G Wᵀ, dW = xᵀ G, db = Σ G",
        "  module: transformer.h.0.attn.c_attn"]
    assert "← first non-finite: every input is finite" in str(error)


def test_init_too_large_is_named_by_the_health_report(printed):
    text, _, warnings, _, out_dir = printed
    assert [w.split(":")[1] for w in warnings] == [" h.0", " h.1"]
    assert all("of GELU inputs below -3 for 10 iterations: the initialisation is likely too large" in w
               for w in warnings)
    assert (out_dir / "health.png").is_file() and (out_dir / "health.jsonl").is_file()


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
