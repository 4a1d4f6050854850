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
from models.lessons import tiny
from models.numbers import fixed

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-5
ARTICLE_LOGITS = [0, -0.1, -0.3, 0.4, -0.7, 0.2]
NUMBER = r"-?\d+\.\d+(?:e[-+]\d+)?|-inf"  # as the printout writes them: 6 decimals, or 1.23e-05 below 1e-4


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


def test_the_docstrings_logits_and_update_hold_to_the_decimals_it_states():
    """The promises in tiny's docstring against the forward worked out at 50 digits (mpmath), not by the engine."""
    exact_logits = [0, -0.09999959417, -0.2999987825, 0.3999983767, -0.6999971592, 0.1999991883]
    doc = " ".join(tiny.__doc__.replace("−", "-").split())
    stated, decimals = re.search(r"logits are \[([^\]]*)\] \(?to (\d) decimals", doc).groups()
    np.testing.assert_array_equal(np.round(exact_logits, int(decimals)), [float(v) for v in stated.split(",")])
    stepped_logit = -0.5169601155  # h · (E[你] − 0.1 · ∂L/∂E[你]) for the same last hidden state h
    before, after = re.search(r"rises from (\S+) to (\S+)\.", doc).groups()
    assert (before, after) == (fixed(exact_logits[tiny.TARGET_ID]), fixed(stepped_logit))


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
    return np.array([[float(x) for x in re.findall(NUMBER, line)] for line in body])


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


def line_with(text, marker, offset=0):
    """The numbers on the line `offset` lines after the first one containing `marker`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if marker in line)
    return [float(x) for x in re.findall(NUMBER, lines[start + offset])]


def test_every_table_is_headed_by_the_articles_section(cli_output):
    sections = {"输入", "词嵌入", "位置编码", "自注意力", "因果掩码", "残差连接", "层归一化", "前馈网络", "输出层",
                "Softmax", "采样", "损失函数", "反向传播", "参数更新"}
    headings = [line for line in cli_output.splitlines() if line.startswith("── ")]
    assert len(headings) >= 30
    for heading in headings:
        assert heading[3:].split(" · ")[0] in sections, heading


def test_small_values_print_in_scientific_notation_and_zero_stays_zero():
    assert fixed(5.1e-11) == "5.10e-11" and fixed(-3.29e-6) == "-3.29e-06" and fixed(-np.inf) == "-inf"
    assert fixed(1e-4) == "0.000100" and fixed(0.0) == fixed(-0.0) == "0.000000"
    assert fixed(0.66554, 4) == "0.6655" and fixed(3e-5, 4) == "3.00e-05" and fixed(0.0, 4) == "0.0000"


def test_tiny_gradients_are_printed_not_rounded_away(run, cli_output):
    model, _, _, _ = run
    printed = numbers_after("∂L/∂W_Q", cli_output, 2)
    assert np.all(np.abs(model.W_Q.grad) < 1e-9) and np.all(printed != 0)
    np.testing.assert_allclose(printed, model.W_Q.grad, rtol=5e-3)
    w1 = numbers_after("∂L/∂W_1", cli_output, 2)
    np.testing.assert_array_equal(model.W_1.grad[:, 2], 0)  # ReLU closed h2 at 爱: exactly no gradient
    np.testing.assert_array_equal(w1[:, 2], 0)
    np.testing.assert_allclose(w1, model.W_1.grad, rtol=5e-3)


def test_score_note_gives_the_difference_and_the_exact_arithmetic(run, cli_output):
    _, steps, _, _ = run
    q, k, s = steps["Q"].numpy()[1], steps["K"].numpy()[0], steps["scores"].numpy()[1]
    article, here, diff = line_with(cli_output, "S[爱, 我] = 0.777")
    assert article == 0.777 and here == pytest.approx(q @ k / math.sqrt(2), abs=5e-7)
    assert diff == pytest.approx(here - 0.777, abs=1e-6) and diff == pytest.approx(0.001070, abs=1e-6)
    np.testing.assert_allclose(line_with(cli_output, "S[爱, 我] = 0.777", 1), [q[0], k[0], q[1], k[1], here],
                               atol=5e-7)
    w = np.exp([0.777, s[1]]) / np.exp([0.777, s[1]]).sum()
    np.testing.assert_allclose(line_with(cli_output, "S[爱, 我] = 0.777", 2)[1:3], w, atol=5e-7)


def test_layer_norm_and_ffn_notes_follow_from_epsilon(cli_output):
    # Row 我 of H⁽⁰⁾ + attention is (1.81, 2.59): δ = −0.39, LayerNorm gives ±0.39/√(0.39² + 1e-5).
    normed = 0.39 / math.sqrt(0.39 ** 2 + 1e-5)
    article, here, diff = line_with(cli_output, "≠ article: ±1.000")[:3]
    assert here == pytest.approx(normed, abs=5e-7) and diff == pytest.approx(normed - 1, rel=5e-3)
    assert line_with(cli_output, "≠ article: ±1.000", 1)[-1] == pytest.approx(normed, abs=5e-7)
    # FFN h0 at 我: 0.3·(−n) + 0.2·n + 0.1 = 0.1·(1 − n) ≈ 3.3e-06, not the article's 0.
    kink = 0.1 * (1 - normed)
    assert line_with(cli_output, "h0 at 我 = 0")[0] == pytest.approx(kink, rel=5e-3)
    assert line_with(cli_output, "h0 at 我 = 0", 1)[-1] == pytest.approx(kink, rel=5e-3)


def test_logits_note_bounds_the_gap_to_the_articles(run, cli_output):
    _, _, logits, _ = run
    gap = np.abs(logits.numpy()[-1] - ARTICLE_LOGITS).max()
    printed = line_with(cli_output, "≠ article: (0, -0.1")[-1]
    assert printed == pytest.approx(gap, rel=0.05) and gap < 1e-5


@pytest.mark.parametrize("marker, right, tokens, scale, kept", [
    ("T = 0.5 row is wrong", "0.3515 / 0.0389 / 0.2356", ["爱", "你", "他"], 2.0, [0, 1, 2, 3, 4, 5]),
    ("top-k 3 row is wrong", "0.4018 / 0.3289 / 0.2693", ["爱", "他", "<pad>"], 1.0, [3, 5, 0]),
])
def test_wrong_sampling_rows_are_corrected_with_the_arithmetic(run, cli_output, marker, right, tokens, scale, kept):
    _, _, logits, _ = run
    z = logits.numpy()[-1] * scale
    e = np.exp(z[kept])
    lines = cli_output.splitlines()
    start = next(i for i, line in enumerate(lines) if marker in line)
    assert f"The right values are {right}:" in lines[start + 1]
    np.testing.assert_allclose(line_with(cli_output, marker, 2), z[kept], atol=5e-7)
    np.testing.assert_allclose(line_with(cli_output, marker, 3), list(e) + [e.sum()], atol=5e-7)
    for offset, token in enumerate(tokens, start=4):
        numerator, total, p = line_with(cli_output, marker, offset)
        assert lines[start + offset].strip().startswith(f"p({token})")
        assert p == pytest.approx(np.exp(z[tiny.VOCAB.index(token)]) / e.sum(), abs=5e-7)
        assert p == pytest.approx(numerator / total, abs=1e-6)


def test_loss_and_gradient_notes_redo_the_articles_rounding(run, cli_output):
    model, steps, logits, loss = run
    assert "2.465 = −ln 0.085 = 2.465104" in cli_output
    assert line_with(cli_output, "2.465 = −ln 0.085")[-1] == pytest.approx(loss.item() - 2.465, abs=1e-6)
    dz, h, grad = line_with(cli_output, "≠ article: (-0.915193, 0.915193)", 1)
    assert dz == pytest.approx(logits.grad[-1][tiny.TARGET_ID], abs=5e-7)
    assert h == pytest.approx(steps["H2"].numpy()[-1, 0], abs=5e-7)
    assert grad == pytest.approx(model.E.grad[tiny.TARGET_ID, 0], abs=5e-7)


def test_update_note_separates_the_step_of_gamma_and_beta(run, cli_output):
    model, _, _, _ = run
    frozen = [p for name, p in model.named_parameters() if not name.startswith("ln")]
    nn.optim.SGD(frozen, lr=tiny.LR).step()
    with ag.no_grad():
        without = model(tiny.INPUT_IDS).numpy()[-1][tiny.TARGET_ID]
    nn.optim.SGD([p for name, p in model.named_parameters() if name.startswith("ln")], lr=tiny.LR).step()
    with ag.no_grad():
        every = model(tiny.INPUT_IDS).numpy()[-1][tiny.TARGET_ID]
    assert line_with(cli_output, "but γ and β (fixed")[-1] == pytest.approx(without, abs=5e-7)
    assert without == pytest.approx(-0.516960, abs=TOL)
    printed_every, printed_diff = line_with(cli_output, "with their step the whole forward gives")
    assert printed_every == pytest.approx(every, abs=5e-7)
    assert printed_diff == pytest.approx(every - without, abs=1e-6)
