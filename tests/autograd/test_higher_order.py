"""create_graph=True with PyTorch's meaning, ag.grad, ag.hvp and ag.hessian, Value's second derivatives, the errors
of a VJP that cannot be differentiated, and memory: a loop of gradient-penalty steps stays flat."""
import gc
import math
import tracemalloc

import numpy as np
import pytest

import autograd as ag
from autograd import Function, Tensor, Value

from ._helpers import leaf, positive, rand


def test_backward_with_create_graph_leaves_gradients_that_have_graphs(rng):
    x = rand(rng, 4)
    (x ** 3).sum().backward(create_graph=True)
    g = x.grad
    assert isinstance(g, Tensor) and g.requires_grad
    np.testing.assert_allclose(g.data, 3 * x.data ** 2, rtol=1e-14)
    x.grad = None
    g.sum().backward()  # the graph was kept (retain_graph follows create_graph)
    np.testing.assert_allclose(x.grad, 6 * x.data, rtol=1e-14)
    assert isinstance(x.grad, np.ndarray)  # a plain backward again: an array


def test_backward_with_create_graph_gives_each_leaf_a_gradient_of_its_own():
    """Add's VJP hands both inputs one gradient Tensor, Sum's is a read-only broadcast and a leaf root's is the
    caller's seed: each .grad is a copy that keeps its graph (PyTorch's too), so scaling one in place (a clip)
    changes no other."""
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    ((a + b) ** 2).sum().backward(create_graph=True)  # both .grad are 2(a + b)
    a.grad.data *= 0.5
    np.testing.assert_array_equal(a.grad.data, [4.0, 6.0])
    np.testing.assert_array_equal(b.grad.data, [8.0, 12.0])
    np.testing.assert_array_equal(ag.grad(b.grad.sum(), a)[0].data, [2.0, 2.0])  # its graph kept

    x = leaf([1.0, 2.0, 3.0])
    (x.sum() * 2).backward(create_graph=True)
    x.grad.data *= 0.5
    np.testing.assert_array_equal(x.grad.data, [1.0, 1.0, 1.0])

    seed, c = Tensor(np.ones(2)), leaf([1.0, 2.0])
    c.backward(seed, create_graph=True)
    c.grad.data *= 3.0
    np.testing.assert_array_equal(c.grad.data, [3.0, 3.0])
    np.testing.assert_array_equal(seed.data, [1.0, 1.0])

    # the first leaf's gradient here is also the array Mul saved for w's: scaling a.grad changed the graph
    a, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    ((a + w * w) ** 2).sum().backward(create_graph=True)  # w.grad = 4w(a + w²)
    a.grad.data *= 0.5
    np.testing.assert_array_equal(ag.grad(w.grad.sum(), w)[0].data, [112.0, 200.0])  # 4a + 12w², as PyTorch


def test_a_plain_backward_after_create_graph_adds_into_the_gradient_tensor_and_keeps_its_graph():
    """The gradient-penalty pattern through .grad, as in PyTorch: backward(create_graph=True), then a penalty
    of x.grad, whose plain backward adds into x.grad (it accumulates until cleared); it refused, as it refuses a
    .grad that does not fit, although the other order (an array .grad, then create_graph) added."""
    x = leaf([0.5, -1.0, 2.0])
    (x ** 3).sum().backward(create_graph=True)  # x.grad = 3x², a Tensor with a graph
    (x.grad * x.grad).sum().backward(retain_graph=True)  # adds ∂Σ(3x²)²/∂x = 36x³
    assert isinstance(x.grad, Tensor) and x.grad.requires_grad
    np.testing.assert_allclose(x.grad.data, 3 * x.data ** 2 + 36 * x.data ** 3, rtol=1e-14)
    # the sum keeps the first part's graph, the second part a constant: d/dx Σ(3x² + c) = 6x
    x.grad, (h,) = None, ag.grad(x.grad.sum(), x)
    np.testing.assert_allclose(h.data, 6 * x.data, rtol=1e-14)
    with ag.detect_anomaly():  # anomaly mode's checked sum too
        (x ** 3).sum().backward(create_graph=True)
        (x ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.data, 3 * x.data ** 2 + 2 * x.data, rtol=1e-14)
    with pytest.raises(RuntimeError, match=r"Tensor\.grad: a tensor \(shape \(3,\), float64, on cpu\) cannot take a "
                                           r"gradient of shape \(2,\), float64, on cpu"):
        x.grad = Tensor(np.ones(2))


def test_any_depth(rng):
    x = rand(rng, 3)
    g = (x ** 5).sum()
    for _ in range(4):
        (g,) = ag.grad(g.sum(), x, create_graph=True)
    np.testing.assert_allclose(g.data, 120 * x.data, rtol=1e-13)  # d⁴x⁵/dx⁴
    (g,) = ag.grad(g.sum(), x, create_graph=True)
    np.testing.assert_allclose(g.data, [120.0] * 3, rtol=1e-13)  # d⁵x⁵/dx⁵
    (g,) = ag.grad(g.sum(), x)
    np.testing.assert_array_equal(g.data, [0.0] * 3)


def test_grad_leaves_every_dot_grad_alone_and_matches_backward_bit_for_bit(rng):
    x, w, b = rand(rng, 5, 3), rand(rng, 3, 4), rand(rng, 4)
    targets = np.array([0, 3, 1, 1, 2])
    loss = ag.cross_entropy(ag.linear(x, w, b).tanh(), targets)
    grads = ag.grad(loss, [x, w, b], retain_graph=True)
    assert all(t.grad is None for t in (x, w, b))
    assert all(isinstance(g, Tensor) and not g.requires_grad for g in grads)
    loss.backward()
    for g, t in zip(grads, (x, w, b)):
        assert g.dtype == t.dtype and g.shape == t.shape
        np.testing.assert_array_equal(g.data, t.grad)


def test_grad_gives_each_input_an_array_of_its_own():
    """Add hands one (read-only, broadcast) array to both inputs: each gradient must be a writable copy, as
    backward's .grad are, or scaling one changes the other."""
    w, b = leaf(np.ones(3)), leaf(np.zeros(3))
    gw, gb = ag.grad(((w + b) * 2.0).sum(), [w, b])
    gw.data *= 0.1
    np.testing.assert_array_equal(gb.data, [2.0, 2.0, 2.0])
    x, y = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    gx, gy = ag.grad((x + y).sum(), [x, y])
    assert not np.shares_memory(gx.data, gy.data) and gx.data.flags.writeable
    gx.data += 1.0
    np.testing.assert_array_equal(gy.data, [1.0, 1.0])
    seed = np.array([1.0, 1.0])
    (gz,) = ag.grad(x * 1.0, [x], grad_outputs=seed)
    gz.data += 1.0
    np.testing.assert_array_equal(seed, [1.0, 1.0])


def test_grad_of_a_non_leaf_and_of_several_outputs(rng):
    x = rand(rng, 3)
    h = x.exp()
    a, b = (h * h).sum(), h.tanh()
    (gh,) = ag.grad(a, h, retain_graph=True)
    np.testing.assert_allclose(gh.data, 2 * h.data, rtol=1e-14)
    vb = rng.standard_normal(3)
    (both,) = ag.grad([a, b], x, [None, vb], retain_graph=True)
    (ga,) = ag.grad(a, x, retain_graph=True)
    (gb,) = ag.grad(b, x, vb)
    np.testing.assert_allclose(both.data, ga.data + gb.data, rtol=1e-14)


def test_grad_of_several_outputs_takes_their_grad_outputs_as_given_not_as_more_to_differentiate(rng):
    # v = 3x depends on x: the gradient is Σᵢ Jᵢᵀ v = (2 + eˣ) 3x, as torch.autograd.grad gives it; a root
    # Σᵢ Σ yᵢ ⊙ v with v an input of it added ∂/∂v's y₁ + y₂ = 2x + eˣ into x's gradient, and freed v's graph
    x0 = rng.uniform(-1, 1, 2)
    for create_graph in (False, True):
        x = leaf(x0)
        v = x * 3.0
        (g,) = ag.grad([x * 2.0, x.exp()], x, grad_outputs=[v, v], create_graph=create_graph)
        np.testing.assert_allclose(g.data, (2 + np.exp(x0)) * 3 * x0, rtol=1e-14)
        if create_graph:  # differentiated through v's graph as well: ∂/∂x Σ (2 + eˣ) 3x = 3 (2 + eˣ) + 3x eˣ
            (h,) = ag.grad(g.sum(), x)
            np.testing.assert_allclose(h.data, 3 * (2 + np.exp(x0)) + 3 * x0 * np.exp(x0), rtol=1e-14)
        else:
            v.sum().backward()  # v's graph is the caller's: neither walked nor freed
            np.testing.assert_array_equal(x.grad, [3.0, 3.0])
    seed = np.array([1.0, 1.0])  # an output's own gradient is a copy of its grad_output, as for one output
    y = x * 1.0
    gy, _ = ag.grad([y, x.exp().sum()], [y, x], grad_outputs=[seed, None])
    gy.data += 1.0
    np.testing.assert_array_equal(seed, [1.0, 1.0])


def test_create_graph_inside_no_grad_still_records_every_part_of_a_gradient(rng):
    # x reaches the loss three ways, once broadcast: its gradient is the parts' sum, the broadcast one summed back
    # over an axis. Those sums are ops of the gradient's graph too, recorded inside no_grad() as in PyTorch; they
    # were not, and the gradient came out without a graph
    x0 = rng.uniform(-1, 1, 3)
    t = np.tanh(x0)
    for how in ("grad", "backward"):
        x = leaf(x0)
        y = (x.exp() + x.tanh()).sum() + (x * leaf([[1.0], [2.0]], requires_grad=False)).sum()
        with ag.no_grad():
            if how == "grad":
                (g,) = ag.grad(y, x, create_graph=True)
            else:
                y.backward(create_graph=True)
                g = x.grad
            assert not ag.is_grad_enabled()
        np.testing.assert_allclose(g.data, np.exp(x0) + 1 - t ** 2 + 3, rtol=1e-14)
        (h,) = ag.grad(g.sum(), x)
        np.testing.assert_allclose(h.data, np.exp(x0) - 2 * t * (1 - t ** 2), rtol=1e-14)


def test_grad_outputs_that_require_grad_give_a_jacobian_vector_product(rng):
    # u = Jᵀv for y = A x; ∂⟨u, w⟩/∂v = J w: a JVP from two VJPs
    a, x = rng.standard_normal((3, 4)), rand(rng, 4)
    v, w = leaf(np.zeros(3)), rng.standard_normal(4)
    (u,) = ag.grad(Tensor(a) @ x, x, grad_outputs=v, create_graph=True)
    (jw,) = ag.grad((u * w).sum(), v)
    np.testing.assert_allclose(jw.data, a @ w, rtol=1e-14)


def test_unused_inputs_and_inputs_without_grad_are_errors_unless_allowed(rng):
    x, unused = rand(rng, 3), rand(rng, 2)
    y = (x * x).sum()
    with pytest.raises(RuntimeError, match=r"input 1 was not used .* allow_unused=True"):
        ag.grad(y, [x, unused], retain_graph=True)
    gx, gu = ag.grad(y, [x, unused], allow_unused=True, retain_graph=True)
    assert gu is None
    np.testing.assert_allclose(gx.data, 2 * x.data)
    with pytest.raises(RuntimeError, match="input 0 does not require grad"):
        ag.grad(y, leaf([1.0], requires_grad=False))
    with pytest.raises(RuntimeError, match="a gradient can be implied only for a scalar"):
        ag.grad(x * 2, x)


def test_retain_graph_false_with_create_graph_frees_the_forward_graph(rng):
    x = rand(rng, 3)
    (g,) = ag.grad(x.tanh().sum(), x, create_graph=True, retain_graph=False)
    with pytest.raises(RuntimeError, match="graph through Tanh was freed"):
        g.sum().backward()  # 1 − z² needs tanh's own VJP, whose saved z went


def test_an_op_whose_vjp_runs_on_arrays_only_says_so_instead_of_a_wrong_second_derivative(rng):
    class Cube(Function):  # a correct first derivative, written on arrays: the graph cannot see through it
        def forward(self, x):
            self.save(x)
            return x ** 3

        def backward(self, g):
            return 3 * g * self.saved[0] ** 2

    x = rand(rng, 3)
    (g,) = ag.grad(Cube.apply(x).sum(), x)
    np.testing.assert_allclose(g.data, 3 * x.data ** 2)
    with pytest.raises(RuntimeError, match=r"Cube: its VJP computes on arrays only.* Cube\.saved_in_graph"):
        ag.grad(Cube.apply(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="checkpoint: .* cannot be differentiated again"):
        ag.grad(ag.checkpoint(lambda t: t.tanh(), x).sum(), x, create_graph=True)


def test_an_op_whose_vjp_calls_numpy_on_the_tensors_of_create_graph_names_itself_and_self_xp(rng):
    class Exp(Function):  # saved_in_graph declared, as the error above asks, but np.exp where self.xp.exp belongs
        def forward(self, x):
            self.save(x)
            return np.exp(x)

        def backward(self, g):
            return g * np.exp(self.saved[0])

        def saved_in_graph(self, inputs, out):
            return tuple(inputs)

    x = rand(rng, 3)
    with pytest.raises(TypeError, match=r"^Exp\.backward under create_graph=True: its VJP runs on Tensors there, "
                                        r"and NumPy's ufuncs refuse them \(.*\); compute it with self\.xp"):
        ag.grad(Exp.apply(x).sum(), x, create_graph=True)  # was NumPy's own words, naming neither op nor fix

    class WhereCube(Function):  # np.where, a NumPy function rather than a ufunc, took the Tensors for constants
        def forward(self, x):
            self.save(x)
            return x ** 3

        def backward(self, g):
            x, = self.saved
            return g * 3 * x * np.where(x > 0, x, x)

        def saved_in_graph(self, inputs, out):
            return tuple(inputs)

    with pytest.raises(TypeError, match=r"^WhereCube\.backward under create_graph=True: its VJP runs on Tensors "
                                        r"there, and np\.where would take them for constants; compute it with"):
        ag.grad(WhereCube.apply(x).sum(), x, create_graph=True)  # d²/dx² came out 3x where it is 6x
    (g,) = ag.grad(WhereCube.apply(x).sum(), x)  # a plain backward runs on arrays: NumPy's functions are right
    np.testing.assert_allclose(g.data, 3 * x.data ** 2)

    class XpExp(Exp):
        def backward(self, g):
            return g * self.xp.exp(self.saved[0])

    (g,) = ag.grad(XpExp.apply(x).sum(), x, create_graph=True)
    (h,) = ag.grad(g.sum(), x)
    np.testing.assert_allclose(h.data, np.exp(x.data))  # d²(Σ eˣ)/dx² = eˣ


def test_detect_anomaly_watches_a_create_graph_backward_too():
    x = leaf([0.0, 4.0])
    # the VJP g/(2√x) at x = 0, recorded as ops: named as without create_graph, not as the forward of its Div
    made_inf = r"^detect_anomaly: backward of Sqrt \(step 2 of backward\) returned NaN/inf as the gradient for x\n"
    with np.errstate(divide="ignore"), ag.detect_anomaly(), pytest.raises(ag.AnomalyError, match=made_inf):
        ag.grad(x.sqrt().sum(), x, create_graph=True)


# ---- hvp and hessian -----------------------------------------------------------------------------------------

torch = pytest.importorskip("torch", reason='the references need PyTorch: pip install -e ".[interop]"')


def mlp_loss(w1, w2, lib=ag):
    """A tiny MLP's mean cross-entropy on fixed data, written once for both engines."""
    rng = np.random.default_rng(5)
    x, t = rng.standard_normal((6, 3)), np.array([0, 1, 1, 0, 1, 0])
    if lib is ag:
        return ag.cross_entropy((Tensor(x) @ w1).tanh() @ w2, t)
    return torch.nn.functional.cross_entropy(torch.tanh(torch.tensor(x) @ w1) @ w2, torch.tensor(t))


def test_hvp_matches_torch_on_a_tiny_mlp(rng):
    w1, w2 = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    v1, v2 = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    value, (h1, h2) = ag.hvp(mlp_loss, (w1, w2), (v1, v2))
    their_value, (t1, t2) = torch.autograd.functional.hvp(
        lambda a, b: mlp_loss(a, b, torch), (torch.tensor(w1), torch.tensor(w2)), (torch.tensor(v1), torch.tensor(v2)))
    assert value.item() == pytest.approx(their_value.item(), rel=1e-13)
    np.testing.assert_allclose(h1.data, t1.numpy(), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(h2.data, t2.numpy(), rtol=1e-10, atol=1e-13)
    assert not h1.requires_grad


def test_hessian_matches_torch_and_hvp(rng):
    x = rng.standard_normal((2, 3))
    fn = lambda t: (t.tanh() * t.softmax()).sum() + (t ** 2).mean()  # noqa: E731
    theirs = torch.autograd.functional.hessian(
        lambda t: (torch.tanh(t) * torch.softmax(t, -1)).sum() + (t ** 2).mean(), torch.tensor(x))
    h = ag.hessian(fn, x)
    assert h.shape == (2, 3, 2, 3)
    np.testing.assert_allclose(h, theirs.numpy(), rtol=1e-10, atol=1e-13)
    v = rng.standard_normal((2, 3))
    _, hv = ag.hvp(fn, Tensor(x), v)
    np.testing.assert_allclose(hv.data, np.tensordot(h, v, axes=2), rtol=1e-10, atol=1e-13)


def test_hvp_hessian_and_jacobian_record_fn_inside_no_grad_too(rng):
    # as torch.autograd.functional's: an evaluation loop's no_grad() gave jacobian zeros, hvp and hessian an error
    x0 = rng.uniform(-1, 1, 3)
    with ag.no_grad():
        value, hv = ag.hvp(lambda t: (t ** 3).sum(), x0, np.ones(3))
        _, (hx, hy) = ag.hvp(lambda t, u: (t * t * u).sum(), (x0, x0 + 1), (np.ones(3), np.ones(3)))
        h = ag.hessian(lambda t: (t ** 3).sum(), x0)
        j = ag.jacobian(lambda t: t.tanh(), x0)
        assert not ag.is_grad_enabled()
    assert value.item() == pytest.approx((x0 ** 3).sum(), rel=1e-14)
    np.testing.assert_allclose(hv.data, 6 * x0, rtol=1e-14)
    np.testing.assert_allclose(hx.data, 2 * (x0 + 1) + 2 * x0, rtol=1e-14)  # [[2u, 2x], [2x, 0]] (1, 1)
    np.testing.assert_allclose(hy.data, 2 * x0, rtol=1e-14)
    np.testing.assert_allclose(h, np.diag(6 * x0), rtol=1e-14)
    np.testing.assert_allclose(j, np.diag(1 - np.tanh(x0) ** 2), rtol=1e-14)


def test_the_hessian_of_softmax_cross_entropy_is_diag_p_minus_p_p_transposed():
    z = np.array([2.0, 1.0, 0.0, -1.0])
    p = np.exp(z) / np.exp(z).sum()
    for target in range(4):  # the target only shifts the gradient p − y: the Hessian is the same for every one
        h = ag.hessian(lambda t: ag.cross_entropy(t[None], np.array([target])), z)
        np.testing.assert_allclose(h, np.diag(p) - np.outer(p, p), rtol=1e-12, atol=1e-15)
    # the mean over rows: one block per row, divided by the rows
    rows = np.array([[2.0, 1.0, 0.0], [0.5, -0.5, 3.0]])
    h = ag.hessian(lambda t: ag.cross_entropy(t, np.array([0, 2])), rows)
    for n, row in enumerate(rows):
        q = np.exp(row) / np.exp(row).sum()
        np.testing.assert_allclose(h[n, :, n, :], (np.diag(q) - np.outer(q, q)) / 2, rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(h[n, :, 1 - n, :], 0)


def test_hessian_and_hvp_of_a_linear_function_are_zero_and_inputs_are_left_alone(rng):
    x = rand(rng, 3)
    np.testing.assert_array_equal(ag.hessian(lambda t: (t * 2.0).sum(), x), np.zeros((3, 3)))
    _, hv = ag.hvp(lambda t: (t * 2.0).sum(), x, np.ones(3))
    np.testing.assert_array_equal(hv.data, np.zeros(3))
    assert x.grad is None
    with pytest.raises(ValueError, match="hessian: fn must return a scalar"):
        ag.hessian(lambda t: t * t, x)


def test_hessian_and_hvp_of_a_function_that_does_not_depend_on_x_are_zero(rng):
    """As torch.autograd.functional's (strict=False) and ag.jacobian's: they raised "grad: this tensor does not
    require grad", naming neither hessian nor hvp."""
    x = rand(rng, 3)
    constant = Tensor(np.array(2.5))
    np.testing.assert_array_equal(ag.hessian(lambda t: constant, x), np.zeros((3, 3)))
    value, hv = ag.hvp(lambda t: constant, x, np.ones(3))
    assert value.item() == 2.5
    np.testing.assert_array_equal(hv.data, np.zeros(3))


# ---- Value ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("x0", [-1.3, -0.2, 0.0, 0.7, 2.5])
def test_the_second_derivative_of_tanh_from_the_scalar_engine(x0):
    x = Value(x0)
    x.tanh().backward(create_graph=True)
    first, x.grad = x.grad, 0.0
    assert isinstance(first, Value)
    first.backward()
    t = math.tanh(x0)
    assert first.data == pytest.approx(1 - t * t, abs=1e-12)
    assert x.grad == pytest.approx(-2 * t * (1 - t * t), abs=1e-12)


SECOND = {  # f, f'', by hand
    "x³": (lambda x: x ** 3, lambda a: 6 * a),
    "x·x·x": (lambda x: x * x * x, lambda a: 6 * a),
    "1/x": (lambda x: 1 / x, lambda a: 2 / a ** 3),
    "ln x": (lambda x: x.log(), lambda a: -1 / a ** 2),
    "eˣ": (lambda x: x.exp(), math.exp),
    "σ(x)": (lambda x: x.sigmoid(), lambda a: (s := 1 / (1 + math.exp(-a))) * (1 - s) * (1 - 2 * s)),
    "relu(x)·x": (lambda x: x.relu() * x, lambda a: 2.0 if a > 0 else 0.0),
    "x − 3/x + x²/2": (lambda x: x - 3 / x + x ** 2 / 2, lambda a: -6 / a ** 3 + 1),
}


@pytest.mark.parametrize("name", list(SECOND))
@pytest.mark.parametrize("x0", [0.6, 1.7])
def test_value_second_derivatives_by_hand(name, x0):
    f, second = SECOND[name]
    x = Value(x0)
    f(x).backward(create_graph=True)
    first, x.grad = x.grad, 0.0
    first.backward()
    assert x.grad == pytest.approx(second(x0), rel=1e-12, abs=1e-12)


def test_each_value_ops_d_spells_the_float_derivatives_it_saved():
    a, b = Value(0.8), Value(-1.9)
    for out in (a + b, a * b, a.exp(), a.log(), a.tanh(), a.sigmoid(), b.relu(), a.relu(), a ** 2.5, a ** -1):
        values = [d.data if isinstance(d, Value) else float(d) for d in out.op.d(out)]
        assert values == pytest.approx(list(out.local_grads), rel=1e-15), out.op.name


def test_value_third_derivative_and_mixed_partials():
    x, y = Value(0.4), Value(-0.9)
    (x.tanh() * y).backward(create_graph=True)
    dx, x.grad, y.grad = x.grad, 0.0, 0.0
    dx.backward(create_graph=True)  # ∂²/∂x² and ∂²/∂y∂x of y·tanh x
    dxx, dxy, x.grad = x.grad, y.grad, 0.0
    t = math.tanh(0.4)
    assert dxx.data == pytest.approx(-0.9 * -2 * t * (1 - t * t), rel=1e-12)
    assert dxy.data == pytest.approx(1 - t * t, rel=1e-12)
    dxx.backward()
    assert x.grad == pytest.approx(-0.9 * (-2 + 6 * t * t) * (1 - t * t), rel=1e-12)


# ---- memory -----------------------------------------------------------------------------------------------------

def _live_tensors():
    return sum(type(o) is Tensor for o in gc.get_objects())


@pytest.mark.parametrize("how", ["grad", "backward"])
def test_a_loop_of_gradient_penalty_steps_keeps_memory_flat(how, rng):
    """WGAN-GP's penalty (‖∂D/∂x‖ − 1)², stepped 20 times with the collector off: were a reference cycle kept,
    or a step's graph held by the next, the tensors alive and the traced memory would grow with every step."""
    w1, w2 = positive(rng, 8, 128), rand(rng, 128, 1)
    data = rng.standard_normal((256, 8))  # each activation 256 KB: a step's arrays are megabytes

    def step():
        x = Tensor(data, requires_grad=True)
        critic = ((x @ w1).tanh() @ w2).sum()
        if how == "grad":
            (gx,) = ag.grad(critic, x, create_graph=True)
        else:
            critic.backward(create_graph=True)
            gx, x.grad = x.grad, None  # backward's .grad holds the graph that holds x: let it go, as in PyTorch
            w1.grad = w2.grad = None
        penalty = (((gx * gx).sum(axis=1).sqrt() - 1) ** 2).mean()
        (critic * 1e-3 + penalty).backward()
        for p in (w1, w2):
            p.data -= 1e-3 * p.grad
            p.grad = None

    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        for _ in range(3):
            step()
        tensors, base = _live_tensors(), tracemalloc.get_traced_memory()[0]
        for _ in range(20):
            step()
        grown = tracemalloc.get_traced_memory()[0] - base
        assert _live_tensors() == tensors
    finally:
        tracemalloc.stop()
        gc.enable()
    # what may grow: Python's free lists of small tuples filling up (they level off near 200 KB)
    assert grown < 256 * 1024, f"memory grew by {grown} bytes over 20 steps, about one activation a step"
