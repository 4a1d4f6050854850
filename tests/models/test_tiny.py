"""models.tiny against the worked article's numbers, and its printout against the engine's own tensors."""
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import autograd as ag
from autograd import topological_order
import nn
from models import tiny

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-5
ARTICLE_LOGITS = [0, -0.1, -0.3, 0.4, -0.7, 0.2]


@pytest.fixture
def run():
    """The article's forward and backward: (model, intermediate tensors, logits, loss)."""
    model = tiny.TinyTransformer()
    steps = {}
    logits = model(tiny.INPUT_IDS, steps=steps)
    logits.retain_grad()
    loss = tiny.last_position_loss(logits, tiny.TARGET_ID)
    loss.backward()
    return model, steps, logits, loss


def test_article_weights():
    w = tiny.article_weights()
    assert tiny.VOCAB == ["<pad>", "<bos>", "我", "爱", "你", "他"]
    assert w["E"].shape == (6, 2) and w["W_1"].shape == (2, 4) and w["W_2"].shape == (4, 2)
    np.testing.assert_array_equal(w["E"][4], [0.2, 0.9])
    np.testing.assert_array_equal(w["b_1"], [0.1] * 4)
    assert all(a.dtype == np.float64 for a in w.values())
    model = tiny.TinyTransformer()
    assert all(p.dtype == np.float64 for p in model.parameters())
    assert isinstance(model, nn.Module)
    assert list(model.state_dict()) == ["E", "W_Q", "W_K", "W_V", "W_1", "b_1", "W_2", "b_2",
                                        "ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"]


def test_sinusoidal_positions_for_d_2():
    np.testing.assert_allclose(tiny.sinusoidal_positions(2, 2), [[0, 1], [math.sin(1), math.cos(1)]], rtol=1e-15)


def test_forward_tables_follow_the_articles_equations(run):
    model, steps, _, _ = run
    w = tiny.article_weights()
    h0 = w["E"][[2, 3]] + tiny.sinusoidal_positions(2, 2)
    np.testing.assert_allclose(steps["H0"].numpy(), h0, rtol=1e-15)
    np.testing.assert_allclose(steps["Q"].numpy(), h0 @ w["W_Q"], rtol=1e-14)
    scores = (h0 @ w["W_Q"]) @ (h0 @ w["W_K"]).T / math.sqrt(2)
    np.testing.assert_allclose(steps["scores"].numpy(), scores, rtol=1e-14)
    weights = steps["attn_weights"].numpy()
    np.testing.assert_allclose(weights[0], [1, 0], atol=1e-15)  # position 0 sees only itself
    np.testing.assert_allclose(weights[1], np.exp(scores[1]) / np.exp(scores[1]).sum(), rtol=1e-14)
    h1 = steps["H1"].numpy()
    np.testing.assert_allclose(np.abs(h1), 1, atol=1e-4)  # LayerNorm over d = 2 gives ±(1, −1)
    np.testing.assert_allclose(steps["ffn_hidden"].numpy(), np.maximum(steps["ffn_pre"].numpy(), 0))


def test_logits_are_the_articles_rounded_values(run):
    _, _, logits, _ = run
    last = logits.numpy()[-1]
    np.testing.assert_allclose(last, [0, -0.09999959, -0.29999878, 0.39999838, -0.69999716, 0.19999919], atol=TOL)
    np.testing.assert_array_equal(np.round(last, 1) + 0.0, ARTICLE_LOGITS)


def test_probability_loss_and_logit_gradient(run):
    _, _, logits, loss = run
    p = ag.softmax(logits.detach()[-1]).numpy()
    assert p[tiny.TARGET_ID] == pytest.approx(0.084807, abs=TOL)
    assert loss.item() == pytest.approx(2.467373, abs=TOL)
    assert loss.item() == pytest.approx(-math.log(p[tiny.TARGET_ID]), rel=1e-12)
    y = np.eye(6)[tiny.TARGET_ID]
    np.testing.assert_allclose(logits.grad[-1], p - y, atol=1e-12)  # ∂L/∂logits = p − y
    np.testing.assert_array_equal(logits.grad[0], np.zeros(6))  # only the last position is scored


def test_gradient_of_the_target_row_of_e_comes_from_the_tied_head(run):
    model, steps, logits, _ = run
    grad_row = model.E.grad[tiny.TARGET_ID]
    np.testing.assert_allclose(grad_row, [-0.915189, 0.915189], atol=TOL)
    h = steps["H2"].numpy()[-1]
    np.testing.assert_allclose(grad_row, logits.grad[-1][tiny.TARGET_ID] * h, rtol=1e-12)


def test_every_gradient_matches_finite_differences():
    model = tiny.TinyTransformer()
    assert ag.gradcheck(lambda *_: tiny.last_position_loss(model(tiny.INPUT_IDS), tiny.TARGET_ID),
                        model.parameters(), eps=1e-6, atol=1e-8, rtol=1e-5)


def test_one_sgd_step_moves_the_row_and_raises_the_logit(run):
    model, steps, logits, _ = run
    old_logit = logits.numpy()[-1][tiny.TARGET_ID]
    nn.optim.SGD(model.parameters(), lr=tiny.LR).step()
    np.testing.assert_allclose(model.E.numpy()[tiny.TARGET_ID], [0.291519, 0.808481], atol=TOL)
    new_logit = float(steps["H2"].numpy()[-1] @ model.E.numpy()[tiny.TARGET_ID])
    assert old_logit == pytest.approx(-0.7, abs=TOL)
    assert new_logit == pytest.approx(-0.516960, abs=TOL)


def test_updating_only_e_and_recomputing_the_forward_gives_the_same_new_logit(run):
    """The article's −0.516960 also holds for a full recomputation when only E is stepped."""
    model, _, _, _ = run
    nn.optim.SGD([model.E], lr=tiny.LR).step()
    with ag.no_grad():
        assert model(tiny.INPUT_IDS).numpy()[-1][tiny.TARGET_ID] == pytest.approx(-0.516960, abs=TOL)


def test_sampling_views():
    logits = ag.Tensor(np.array(ARTICLE_LOGITS, dtype=np.float64))
    p = np.exp(ARTICLE_LOGITS) / np.exp(ARTICLE_LOGITS).sum()
    np.testing.assert_allclose(tiny.temperature_probs(logits, 1.0).numpy(), p, rtol=1e-12)
    sharp = np.exp(np.array(ARTICLE_LOGITS) / 0.5)
    np.testing.assert_allclose(tiny.temperature_probs(logits, 0.5).numpy(), sharp / sharp.sum(), rtol=1e-12)
    top3 = tiny.top_k_probs(logits, 3).numpy()
    kept = [0, 3, 5]  # logits 0, 0.4, 0.2
    np.testing.assert_allclose(top3[kept], p[kept] / p[kept].sum(), rtol=1e-12)
    assert np.count_nonzero(top3) == 3
    # Sorted: 爱 0.2548, 他 0.2086, <pad> 0.1708: mass before <pad> is 0.463 < 0.5, so three stay.
    np.testing.assert_allclose(tiny.top_p_probs(logits, 0.5).numpy(), top3, rtol=1e-12)
    np.testing.assert_allclose(tiny.top_p_probs(logits, 0.2).numpy(), np.eye(6)[3])


def test_demo_loss_value_names_and_graph():
    loss = tiny.demo_loss()
    assert loss.item() == pytest.approx(2.467373, abs=TOL)
    assert tiny.demo_loss().item() == loss.item()
    recorded = topological_order(loss)
    names = {t.name for t in recorded}
    ops = {t.op.name for t in recorded if t.op is not None}
    scopes = {t.op.scope for t in recorded if t.op is not None}
    assert {"E", "W_Q", "W_K", "W_V", "W_1", "b_1", "W_2", "b_2", "X", "H0", "Q", "K", "V", "scores",
            "attn_weights", "H1", "H2", "logits", "logits[-1]", "loss"} <= names
    assert {"Embedding", "Add", "MatMul", "Transpose", "Div", "Softmax", "LayerNorm", "ReLU",
            "GetItem", "CrossEntropy"} <= ops
    assert {"attn", "ln1", "ffn", "ln2"} <= scopes


def numbers_after(heading, text, rows):
    """The numbers of the `rows` table rows printed under the first line containing `heading`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if heading in line)
    body = lines[start + 2:start + 2 + rows]  # skip the heading and the column labels
    return np.array([[float(x) for x in re.findall(r"-?\d+\.\d{6}|-inf", line)] for line in body])


@pytest.fixture(scope="module")
def cli_output():
    result = subprocess.run([sys.executable, "-m", "models.tiny"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_cli_prints_every_table_in_the_articles_order(cli_output):
    headings = ["tokens", "one-hot", "X = embeddings", "PE = sinusoidal", "H⁽⁰⁾ = X + PE", "Q = H⁽⁰⁾ W_Q",
                "K = H⁽⁰⁾ W_K", "V = H⁽⁰⁾ W_V", "scores = Q Kᵀ / √2", "masked scores", "attention weights",
                "attention output", "H⁽¹⁾ = LayerNorm", "FFN hidden before ReLU", "FFN hidden after ReLU",
                "FFN output", "H⁽²⁾ = LayerNorm", "logits", "probabilities", "greedy", "T = 0.5", "T = 2",
                "top-k = 3", "top-p = 0.5", "loss", "∂L/∂logits", "∂L/∂E", "∂L/∂W_Q", "∂L/∂b_2",
                "one SGD step"]
    positions = [cli_output.index(h) for h in headings]
    assert positions == sorted(positions)


def test_cli_prints_the_key_numbers(cli_output):
    for text in ("p(你) = 0.084807", "2.467373", "-0.915189   0.915189", "0.291519   0.808481",
                 "-0.699997 → -0.516960", "greedy (argmax): 爱", "-inf"):
        assert text in cli_output, text


def test_cli_tables_are_the_engines_tensors(run, cli_output):
    _, steps, logits, _ = run
    for heading, name in (("H⁽⁰⁾ = X + PE", "H0"), ("attention weights", "attn_weights"),
                          ("FFN hidden before ReLU", "ffn_pre"), ("H⁽²⁾ = LayerNorm", "H2")):
        np.testing.assert_allclose(numbers_after(heading, cli_output, 2), steps[name].numpy(), atol=5e-7)
    np.testing.assert_allclose(numbers_after("logits = h Eᵀ", cli_output, 1)[0], logits.numpy()[-1], atol=5e-7)


def test_cli_computes_rather_than_recites(monkeypatch, capsys):
    """With other weights, the printed tables change with them: nothing in the printout is typed in."""
    weights = tiny.article_weights()
    weights["E"] = weights["E"] * 2
    weights["W_V"] = weights["W_V"][::-1].copy()
    monkeypatch.setattr(tiny, "article_weights", lambda: weights)
    tiny.main([])
    out = capsys.readouterr().out
    model = tiny.TinyTransformer(weights)
    steps = {}
    logits = model(tiny.INPUT_IDS, steps=steps)
    np.testing.assert_allclose(numbers_after("H⁽⁰⁾ = X + PE", out, 2), steps["H0"].numpy(), atol=5e-7)
    np.testing.assert_allclose(numbers_after("attention output", out, 2), steps["attn_out"].numpy(), atol=5e-7)
    np.testing.assert_allclose(numbers_after("logits = h Eᵀ", out, 1)[0], logits.numpy()[-1], atol=5e-7)
    assert "2.467373" not in out


def test_the_model_copies_the_weights_it_is_given():
    weights = tiny.article_weights()
    model = tiny.TinyTransformer(weights)
    model.E.data += 1
    np.testing.assert_array_equal(weights["E"], tiny.article_weights()["E"])
