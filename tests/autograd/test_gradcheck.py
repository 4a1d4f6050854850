"""gradcheck's failure table and picture, and jacobian's full matrix, against numbers worked out independently here."""
import re
import subprocess
import sys

import numpy as np
import pytest

import autograd as ag
from autograd import Tensor, heatmaps

from ._helpers import PNG, drawn_matrices


class WrongSquare(ag.Function):
    """x² with a wrong VJP: 3x·g where 2x·g is right."""

    def forward(self, x):
        self.save(x)
        return x * x

    def backward(self, g):
        return g * 3 * self.saved[0]


def table_rows(message):
    """The table's data rows as (input, index, analytic, numeric, error) strings."""
    lines = message.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["input", "index"])
    rows = []
    for line in lines[start + 1:]:
        if not line.strip()[0].isdigit():
            break
        first, rest = line.split(None, 1)
        index, numbers = rest.split("]", 1)
        rows.append((int(first), index + "]", *[float(s) for s in numbers.split()]))
    return rows


def test_failure_shows_analytic_beside_numeric_for_each_wrong_entry():
    # L = Σ vᵢ xᵢ², v the check's fixed projection (seed 0): analytic 3xᵢvᵢ, numeric ≈ 2xᵢvᵢ, error |xᵢvᵢ|.
    x = np.array([1.0, -2.0, 0.5])
    v = np.random.default_rng(0).standard_normal(3)
    with pytest.raises(ag.GradcheckError) as info:
        ag.gradcheck(lambda t: WrongSquare.apply(t), [Tensor(x, requires_grad=True)])
    message = str(info.value)
    assert "input 0 (shape (3,))" in message.splitlines()[0]
    rows = table_rows(message)
    expected = sorted(((0, f"[{i}]", 3 * x[i] * v[i], 2 * x[i] * v[i], abs(x[i] * v[i])) for i in range(3)),
                      key=lambda r: -r[4])
    assert [r[:2] for r in rows] == [r[:2] for r in expected]  # worst first
    for got, want in zip(rows, expected):
        np.testing.assert_allclose(got[2:4], want[2:4], rtol=1e-6)  # printed to 8 digits
        np.testing.assert_allclose(got[4], want[4], rtol=5e-3)      # the error to 3


def test_only_failing_inputs_and_entries_are_listed_and_the_rest_counted():
    # input 0 is right (x·y), input 1 goes through WrongSquare: only input 1's 12 entries fail; 5 shown.
    x = Tensor(np.linspace(1, 2, 12).reshape(3, 4), requires_grad=True)
    y = Tensor(np.linspace(-1, 1.5, 12).reshape(3, 4) + 0.05, requires_grad=True)
    with pytest.raises(ag.GradcheckError) as info:
        ag.gradcheck(lambda a, b: a * 2.0 + WrongSquare.apply(b), [x, y])
    message = str(info.value)
    assert "input 1 (shape (3, 4))" in message and "input 0" not in message.splitlines()[0]
    rows = table_rows(message)
    assert len(rows) == 5 and {r[0] for r in rows} == {1}
    errors = [r[4] for r in rows]
    assert errors == sorted(errors, reverse=True)
    assert "… and 7 more" in message


class NaNGradient(ag.Function):
    """z = 2x with a VJP that returns NaN: a NaN never passes a tolerance test."""

    def forward(self, x):
        return 2 * x

    def backward(self, g):
        return g * np.nan


def test_a_nan_gradient_fails_the_check():
    with pytest.raises(ag.GradcheckError) as info:
        ag.gradcheck(lambda t: NaNGradient.apply(t), [Tensor(np.array([1.0, -2.0]), requires_grad=True)])
    rows = table_rows(str(info.value))
    assert [r[1] for r in rows] == ["[0]", "[1]"] and all(np.isnan(r[2]) for r in rows)
    np.testing.assert_allclose([r[3] for r in rows], 2 * np.random.default_rng(0).standard_normal(2), rtol=1e-6)


def test_passing_check_returns_true_and_leaves_inputs_unchanged():
    data = np.array([[0.3, -1.2], [2.0, 0.7]])
    x = Tensor(data.copy(), requires_grad=True)
    assert ag.gradcheck(lambda t: (t @ t).tanh(), [x]) is True
    np.testing.assert_array_equal(x.data, data)


def test_one_tensor_given_as_the_inputs_is_checked_as_fns_one_argument():
    # as torch.autograd.gradcheck takes it; list() made its rows the inputs: fn(row) was checked against the rows'
    # missing .grad, a false "backward() disagrees" for a right VJP (a 3-row tensor gave fn three arguments)
    x = Tensor(np.array([[0.3, -1.2, 2.0]]), requires_grad=True)
    assert ag.gradcheck(lambda t: (t * t).sum(axis=1), x) is True
    v = np.random.default_rng(0).standard_normal(1)  # the check's projection of fn's one output
    np.testing.assert_allclose(x.grad, 2 * v * x.data, rtol=1e-12)


def test_a_failing_0d_input_gets_its_table_and_picture(tmp_path):
    x = Tensor(np.array(1.5), requires_grad=True)
    v = np.random.default_rng(0).standard_normal(())
    path = tmp_path / "mismatch.png"
    with pytest.raises(ag.GradcheckError, match=f"picture: {path}") as info:
        ag.gradcheck(lambda t: WrongSquare.apply(t), [x], picture=path)
    assert "input 0 (shape ())" in str(info.value).splitlines()[0]
    [row] = table_rows(str(info.value))
    assert row[:2] == (0, "[]")
    np.testing.assert_allclose(row[2:4], [3 * 1.5 * v, 2 * 1.5 * v], rtol=1e-6)
    assert path.read_bytes().startswith(PNG)


def test_inputs_keep_their_arrays_shape_and_sharing():
    scalar = Tensor(np.array(0.5), requires_grad=True)
    base = np.arange(12.0).reshape(3, 4)
    strided = Tensor(base[:, ::2], requires_grad=True)  # a view of base, not contiguous
    broadcast = Tensor(np.broadcast_to(np.array([1.0, -2.0]), (3, 2)), requires_grad=True)  # read-only
    arrays = [t.data for t in (scalar, strided, broadcast)]
    assert ag.gradcheck(lambda a, b, c: (a * b).tanh() * c, [scalar, strided, broadcast]) is True
    assert all(t.data is array for t, array in zip((scalar, strided, broadcast), arrays))
    assert scalar.shape == () and np.shares_memory(strided.data, base)
    np.testing.assert_array_equal(base, np.arange(12.0).reshape(3, 4))


def test_inputs_are_restored_when_fn_raises_while_an_entry_is_nudged():
    data = np.array([1.0, 2.0])
    x = Tensor(data.copy(), requires_grad=True)
    calls = []

    def fails_on_the_first_nudge(t):
        calls.append(None)
        if len(calls) == 2:  # call 1 is the analytic pass, call 2 sees x[0] + ε
            raise RuntimeError("fn failed")
        return t * 2.0

    with pytest.raises(RuntimeError, match="fn failed"):
        ag.gradcheck(fails_on_the_first_nudge, [x])
    np.testing.assert_array_equal(x.data, data)


class Exp10(ag.Function):
    """e^(10x), whose outputs span many magnitudes, with its VJP 10·e^(10x)·g scaled by `factor` and with
    `offset` added at index 0: factor 1, offset 0 is right."""

    def forward(self, x, factor=1.0, offset=0.0):
        self.factor, self.offset = factor, offset
        self.save(np.exp(10 * x))
        return self.saved[0]

    def backward(self, g):
        grad = 10 * self.saved[0] * g * self.factor
        grad[0] += self.offset
        return grad


def test_a_right_vjp_passes_when_the_outputs_span_many_magnitudes():
    # Differencing Σ v ⊙ f as one number put its rounding, ≈ e²⁰·2⁻⁵²/ε ≈ 0.1, on entries worth 10⁻⁸.
    for seed in range(20):
        x = np.random.default_rng(seed).standard_normal(6)
        assert ag.gradcheck(lambda t: (10 * t).exp(), [Tensor(x, requires_grad=True)]) is True
    assert ag.gradcheck(lambda t: Exp10.apply(t), [Tensor(np.linspace(-2, 2, 6), requires_grad=True)]) is True


@pytest.mark.parametrize("factor, offset, failing", [(1 + 1e-3, 0.0, ["[5]", "[4]", "[3]", "[2]"]),
                                                     (1.0, 1e-4, ["[0]"])])
def test_a_slightly_wrong_vjp_fails_when_the_outputs_span_many_magnitudes(factor, offset, failing):
    # x = −2 … 2: true entries from 10e⁻²⁰·v₀ ≈ 10⁻⁸ up to 10e²⁰·v₅ ≈ 10⁹. 0.1 % too large fails the four
    # entries where 0.1 % exceeds atol; 10⁻⁴ added at the 10⁻⁸ entry fails that entry alone.
    x = Tensor(np.linspace(-2, 2, 6), requires_grad=True)
    with pytest.raises(ag.GradcheckError) as info:
        ag.gradcheck(lambda t: Exp10.apply(t, factor=factor, offset=offset), [x])
    assert [r[1] for r in table_rows(str(info.value))] == failing


def test_gradcheck_refuses_an_output_that_is_not_float64():
    """x² cast to float32 has a right VJP, but its differences were float32 rounding over 2ε: the check failed it."""
    x = Tensor(np.array([0.3, -1.2, 2.0]), requires_grad=True)
    with pytest.raises(TypeError, match="gradcheck: fn returned a Tensor of float32, and finite differences need "
                                        "float64 .*\\(leave out the cast to float32\\)"):
        ag.gradcheck(lambda t: (t * t).astype(np.float32), x)
    with pytest.raises(TypeError, match="gradcheck: input 1 is float32, .* make it with dtype=np.float64"):
        ag.gradcheck(lambda a, b: a * b, [x, Tensor(np.ones(3, dtype=np.float32), requires_grad=True)])


@pytest.mark.parametrize("option, value, rule", [
    ("eps", 0, "(0, inf)"), ("eps", -1e-6, "(0, inf)"), ("eps", float("nan"), "(0, inf)"),
    ("eps", float("inf"), "(0, inf)"), ("eps", "1e-6", "(0, inf)"), ("atol", -1.0, "[0, inf)"),
    ("atol", float("nan"), "[0, inf)"), ("rtol", -1e-4, "[0, inf)"), ("rtol", float("nan"), "[0, inf)")])
def test_gradcheck_refuses_a_step_or_tolerance_that_makes_the_verdict_meaningless(option, value, rule):
    """eps=0 divided by zero; a NaN or negative tolerance failed a right VJP with a table blaming backward()."""
    calls = []
    x = Tensor(np.array([0.3, -1.2]), requires_grad=True)
    with pytest.raises(ValueError, match=re.escape(f"gradcheck: {option} must be a number in {rule}, got {value!r}")):
        ag.gradcheck(lambda t: calls.append(1) or t * t, x, **{option: value})
    assert calls == []  # refused before fn ran


def test_gradcheck_of_an_output_without_a_graph_compares_a_zero_gradient_with_the_differences():
    """A constant passes; a graph broken through .data fails with its table (analytic 0 beside 2xv), where both
    raised "backward: this tensor does not require grad", naming neither gradcheck nor the lost gradient."""
    x = Tensor(np.array([0.5, -1.5]), requires_grad=True)
    assert ag.gradcheck(lambda t: Tensor(np.ones(2)), x) is True
    with pytest.raises(ag.GradcheckError) as failure:
        ag.gradcheck(lambda t: Tensor(t.data ** 2), x)
    v = np.random.default_rng(0).standard_normal(2)
    rows = sorted(table_rows(str(failure.value)), key=lambda row: row[1])
    assert [row[1] for row in rows] == ["[0]", "[1]"]
    np.testing.assert_array_equal([row[2] for row in rows], [0, 0])
    np.testing.assert_allclose([row[3] for row in rows], 2 * v * x.data, rtol=1e-6)


def test_gradcheck_of_a_non_leaf_input_reads_the_gradient_backward_gave_it():
    """A non-leaf keeps no .grad unless asked: the analytic side read 0 and a right VJP failed."""
    x = Tensor(np.array([0.5, -1.5, 2.0]), requires_grad=True)
    y = x * 1.0
    assert ag.gradcheck(lambda t: (t * t).tanh(), y) is True
    v = np.random.default_rng(0).standard_normal(3)
    np.testing.assert_allclose(y.grad, v * 2 * y.data / np.cosh(y.data ** 2) ** 2, rtol=1e-12)


def test_jacobian_of_softmax_is_diag_p_minus_p_p_transpose():
    # Lesson 000: z = (2, 1, 0), p = e^z / Σe^z; ∂pᵢ/∂zⱼ = pᵢ(δᵢⱼ − pⱼ)
    z = np.array([2.0, 1.0, 0.0])
    p = np.exp(z) / np.exp(z).sum()
    J = ag.jacobian(ag.softmax, z)
    assert J.shape == (3, 3)
    np.testing.assert_allclose(J, np.diag(p) - np.outer(p, p), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(J.sum(axis=0), 0, atol=1e-15)  # Σᵢ pᵢ = 1 whatever z is


def test_jacobian_shape_is_output_shape_then_input_shape():
    # f(X) = X @ W with X (2, 3), W (3, 4): ∂f[i, k]/∂X[j, l] = δᵢⱼ W[l, k]
    W = np.arange(12.0).reshape(3, 4)
    X = np.ones((2, 3))
    J = ag.jacobian(lambda t: t @ Tensor(W), X)
    assert J.shape == (2, 4, 2, 3)
    expected = np.einsum("ij,lk->ikjl", np.eye(2), W)
    np.testing.assert_array_equal(J, expected)


def test_jacobian_leaves_the_callers_tensor_alone_and_is_zero_where_nothing_depends():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    J = ag.jacobian(lambda t: t * 3.0, x)
    np.testing.assert_array_equal(J, 3.0 * np.eye(2))
    assert x.grad is None
    np.testing.assert_array_equal(ag.jacobian(lambda t: Tensor(np.ones(3)), x), np.zeros((3, 2)))


def test_jacobian_and_hessian_write_no_grad_into_a_parameter_fn_reads():
    """Each of their backward() calls added into the .grad of every leaf fn read: one per output row."""
    w = Tensor(np.array([0.5, -2.0, 3.0]), requires_grad=True)
    x = np.array([1.0, 2.0, -1.0])
    np.testing.assert_array_equal(ag.jacobian(lambda t: t * w, x), np.diag(w.data))
    np.testing.assert_array_equal(ag.hessian(lambda t: (t * t * w).sum(), x), np.diag(2 * w.data))
    assert w.grad is None


def test_jacobian_refuses_large_inputs_and_non_tensor_results():
    with pytest.raises(ValueError, match="jacobian: x has 2000 elements"):
        ag.jacobian(lambda t: t, np.zeros(2000))
    with pytest.raises(TypeError, match="fn must return a Tensor, got float"):
        ag.jacobian(lambda t: 1.0, np.zeros(2))


def test_jacobian_refuses_a_large_output_as_it_refuses_a_large_input():
    """x had a limit, fn's output none: a 1024-element x mapped to 10⁶ outputs allocated an 8 GB matrix and ran
    10⁶ backward passes, for minutes, before anything was said."""
    message = (r"jacobian: fn's output has 2000 elements \(shape \(1000, 2\)\), one backward pass each; the full "
               r"matrix is for small teaching inputs \(≤ 1024\)")
    with pytest.raises(ValueError, match=message):
        ag.jacobian(lambda t: Tensor(np.ones((1000, 1))) * t, np.ones(2))


@pytest.mark.parametrize("x, dtype", [(np.array([1, 2]), "int64"), (3, "int64"), ([True, False], "bool")])
def test_jacobian_refuses_a_non_float_input_by_name(x, dtype):
    """An integer x failed inside Tensor, naming neither jacobian nor float64 ("only floating-point tensors can
    require grad ... call .astype('float32')")."""
    with pytest.raises(TypeError, match=f"jacobian: x holds {dtype} values, .* np.asarray\\(x, dtype=np.float64\\)"):
        ag.jacobian(lambda t: t * t, x)


def test_gradcheck_draws_analytic_numeric_and_their_difference_on_a_failure(tmp_path, monkeypatch):
    pictures = []
    original = heatmaps.figure
    monkeypatch.setattr(heatmaps, "figure", lambda *a, **k: pictures.append(original(*a, **k)) or pictures[-1])
    x = np.arange(6.0).reshape(2, 3) / 4
    v = np.random.default_rng(0).standard_normal((2, 3))  # gradcheck's projection, seed 0
    path = tmp_path / "mismatch.png"
    with pytest.raises(ag.GradcheckError, match=f"picture: {path}"):
        ag.gradcheck(lambda t: WrongSquare.apply(t), [Tensor(x, requires_grad=True)], picture=path)
    assert path.read_bytes().startswith(PNG)
    analytic, numeric, difference = drawn_matrices(pictures[0])
    np.testing.assert_allclose(analytic, 3 * x * v, atol=1e-12)
    np.testing.assert_allclose(numeric, 2 * x * v, atol=1e-6)
    np.testing.assert_allclose(difference, x * v, atol=1e-6)


def test_a_heatmap_scales_to_its_finite_values_and_draws_nan_and_inf_apart():
    """An inf set the scale to ±1, so every finite value was drawn as 0; NaN and inf were drawn white, as 0 is,
    and an inf's value was written white on white."""
    m = np.array([[1e-3, -2e-3, np.inf], [3e-3, np.nan, -1e-3]])
    picture = heatmaps.figure([[heatmaps.Panel("m", m)]])
    image = next(ax.images[0] for ax in picture.axes if ax.images)
    assert (image.norm.vmin, image.norm.vmax) == (-3e-3, 3e-3)
    rgba = image.to_rgba(image.get_array())
    black = (0.0, 0.0, 0.0, 1.0)
    assert tuple(rgba[0, 2]) == tuple(rgba[1, 1]) == black
    assert tuple(rgba[1, 0]) == tuple(image.cmap(1.0))  # 3e-3, the largest finite value, at the top of the scale
    written = {t.get_text(): t.get_color() for ax in picture.axes for t in ax.texts}
    assert written["inf"] == written["nan"] == "white"
    assert "black: nan or ±inf, outside the colour scale" in picture._supxlabel.get_text()


def test_gradcheck_reports_the_mismatch_when_the_picture_cannot_be_written(tmp_path):
    path = tmp_path / "no" / "such" / "folder" / "p.png"
    with pytest.raises(ag.GradcheckError, match="picture: not written"):
        ag.gradcheck(lambda t: WrongSquare.apply(t), [Tensor(np.ones(2), requires_grad=True)], picture=path)


@pytest.mark.parametrize("picture, error, message", [
    (123, TypeError, "gradcheck: picture= must be a file name (a str or pathlib.Path), got int"),
    ("mismatch", ValueError, "gradcheck: picture= 'mismatch': a picture is written as .png, .svg or .pdf"),
    ("mismatch.jpeg", ValueError, "gradcheck: picture= 'mismatch.jpeg': a picture is written as .png, .svg or .pdf"),
])
def test_gradcheck_refuses_a_picture_path_it_cannot_write_before_any_work(tmp_path, monkeypatch, picture, error,
                                                                        message):
    """A number ended in an AttributeError that hid the mismatch; a name without a suffix made matplotlib write
    mismatch.png while the error named 'mismatch'; both only after every finite difference had been taken."""
    monkeypatch.chdir(tmp_path)
    calls = []
    with pytest.raises(error) as info:
        ag.gradcheck(lambda t: calls.append(t) or WrongSquare.apply(t), [Tensor(np.ones(2), requires_grad=True)],
                     picture=picture)
    assert str(info.value).startswith(message)
    assert calls == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["mismatch.png", "pipe"])
def test_gradchecks_picture_goes_into_a_pipe(piped, name):
    """matplotlib's PNG writer seeks, which a pipe refuses: the picture was "not written (UnsupportedOperation: File
    or stream is not seekable)"; a pipe without a suffix takes PNG, as viz.jacobian's --out does."""
    pipe, received = piped(name)
    with pytest.raises(ag.GradcheckError) as info:
        ag.gradcheck(lambda t: WrongSquare.apply(t), [Tensor(np.ones(2), requires_grad=True)], picture=pipe)
    assert str(info.value).splitlines()[-1] == (f"  picture: {pipe} (analytic, numeric and their difference for each "
                                                "failing input)")
    assert received().startswith(PNG)


def test_gradcheck_draws_into_a_device_as_viz_jacobian_does():
    """picture='/dev/null' was refused as a name without .png, .svg or .pdf, where viz.jacobian --out takes it."""
    with pytest.raises(ag.GradcheckError) as info:
        ag.gradcheck(lambda t: WrongSquare.apply(t), [Tensor(np.ones(2), requires_grad=True)], picture="/dev/null")
    assert str(info.value).splitlines()[-1] == ("  picture: /dev/null (analytic, numeric and their difference for "
                                                "each failing input)")


def test_gradcheck_that_passes_draws_nothing(tmp_path):
    path = tmp_path / "p.png"
    assert ag.gradcheck(lambda t: t * t, [Tensor(np.ones(2), requires_grad=True)], picture=path)
    assert not path.exists()


def test_autograd_does_not_load_matplotlib():
    code = "import autograd, sys; print('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_gradcheck_inside_no_grad_still_checks_the_vjp():
    """fn ran in the caller's mode: inside no_grad() it made no graph, and a right VJP read as 0 and failed."""
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    with ag.no_grad():
        assert ag.gradcheck(lambda t: t * t, x) is True
        assert not ag.is_grad_enabled()
