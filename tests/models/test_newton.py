"""models.newton: Newton-CG by Hessian-vector products on lesson 1's bigram, beside gradient descent."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import autograd as ag
from models.lessons import newton
from models.lessons.bigram import counting_lower_bound, lesson_setup

ROOT = Path(__file__).resolve().parents[2]


def test_conjugate_gradients_solves_a_damped_positive_system_and_stops_at_negative_curvature():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 6))
    h, b = a @ a.T, rng.standard_normal(6)
    (p,), products = newton.conjugate_gradients(lambda v: [h @ v[0]], [b], damping=0.5, iterations=20)
    np.testing.assert_allclose(p, np.linalg.solve(h + 0.5 * np.eye(6), b), rtol=1e-8)
    assert products <= 7  # CG is exact in n = 6 steps, and the test of the seventh residual stops it
    (p,), products = newton.conjugate_gradients(lambda v: [-v[0]], [b], damping=0.5, iterations=20)
    assert products == 1 and not p.any()  # H + λI = −½I: no minimum along the first direction, no step


def test_a_hessian_vector_product_is_the_hessian_times_the_vector():
    model, _, cur, nxt = lesson_setup()
    exact, numeric = newton.finite_difference_check(model, cur, nxt)
    for a, b in zip(exact, numeric):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
    v = np.random.default_rng(1).standard_normal(model.W_U.shape)
    hidden = ag.embedding(model.E.detach(), cur)  # the model's forward, E held fixed
    full = ag.hessian(lambda w: ag.cross_entropy(hidden @ w, nxt), model.W_U.data)  # W_U's 120 × 120 block
    grads = ag.grad(ag.cross_entropy(model(cur), nxt), [model.E, model.W_U], create_graph=True)
    _, hv = newton.hessian_vector_product(grads, [model.E, model.W_U], [np.zeros(model.E.shape), v])
    np.testing.assert_allclose(hv, np.tensordot(full, v, axes=2), rtol=1e-10, atol=1e-12)


def test_the_lessons_run_newton_beats_descent_in_steps_and_near_the_minimum_in_passes():
    _, chars, cur, nxt = lesson_setup()
    bound = counting_lower_bound(cur, nxt, len(chars))
    descent = newton.gradient_descent(lesson_setup()[0], cur, nxt)
    assert f"{descent[-1][2]:.4f}" == "0.6557"  # lesson 000's figure for step 500
    run = newton.newton(lesson_setup()[0], cur, nxt)
    losses = [loss for _, _, loss in run]
    assert losses[0] == pytest.approx(2.7319984903342007, rel=1e-14)
    assert all(b <= a for a, b in zip(losses, losses[1:]))  # a step that would raise the loss is refused
    assert losses[15] < descent[-1][2] and losses[-1] - bound < 3e-4
    passes = [p for _, p, _ in run]
    assert passes[0] == 0 and run[-1][1] < 500  # below descent's 500 passes' loss in fewer passes too


def test_the_command_prints_both_runs_and_writes_the_picture(tmp_path, capsys):
    out = tmp_path / "pictures" / "n.png"
    newton.main(["--gd-steps", "100", "--newton-steps", "6", "--out", str(out)])
    text = capsys.readouterr().out
    assert "H v from two backward passes" in text and "largest difference" in text
    assert "step  100  loss 0.6808" in text  # lesson 000's figure for step 100
    assert "step    6  loss 1.1620" in text and f"wrote {out}" in text
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_picture_name_without_its_format_is_refused_before_the_lesson(tmp_path, capsys, monkeypatch):
    """--out n.txt held PNG bytes, and n.svg too."""
    monkeypatch.setattr(newton, "lesson_setup", lambda: pytest.fail("ran the lesson before checking --out"))
    with pytest.raises(SystemExit) as exit_:
        newton.main(["--out", str(tmp_path / "n.txt")])
    assert (exit_.value.code, *capsys.readouterr()) == (
        2, "", f"python -m models.newton: error: argument --out: the name {str(tmp_path / 'n.txt')!r}: a picture is "
               "written as .png, .svg or .pdf; end its name with one (see --help)\n")
    assert list(tmp_path.iterdir()) == []


def test_the_picture_goes_into_a_pipe(piped, capsys):
    """matplotlib's PNG writer seeks, which a pipe refuses: --out a FIFO ended in "File or stream is not seekable"."""
    pipe, received = piped("newton.png")
    newton.main(["--gd-steps", "2", "--newton-steps", "1", "--out", str(pipe)])
    assert received()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {pipe}" in capsys.readouterr().out


def test_a_diverging_descent_is_one_line_and_draws_nothing(tmp_path, capsys):
    """--lr 1e30 once printed NaN losses and ended in a traceback from the plot's axis limits."""
    out = tmp_path / "n.png"
    with pytest.raises(SystemExit) as exit_:
        newton.main(["--lr", "1e30", "--gd-steps", "10", "--newton-steps", "1", "--out", str(out)])
    assert exit_.value.code == ("error: training diverged at step 1 (loss 1.266e+57) with learning rate 1e+30; try "
                                "a smaller one, e.g. --lr 1e+29")
    assert not out.exists() and "nan" not in capsys.readouterr().out


def test_python_dash_m_and_the_gradient_graph_viz_draws():
    run = subprocess.run([sys.executable, "-m", "models.newton", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0 and "--newton-steps" in run.stdout
    loss = newton.demo_loss()
    assert loss.item() == pytest.approx(2.7319984903342007, rel=1e-14)
