"""Value, the scalar engine: every op's result and derivative checked against numbers derived by hand."""
import math

import numpy as np
import pytest

from autograd import Constant, Tensor, Value, topological_order


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=1e-12)


def test_value_holds_data_and_zero_grad():
    v = Value(3)
    assert v.data == 3.0 and isinstance(v.data, float)
    assert v.grad == 0.0


def test_hand_derived_rational_expression():
    # x = 2, y = 3
    # u = x·y = 6;  v = u + x² = 10;  w = v / y = 10/3;  f = ln w + relu(y) = ln(10/3) + 3
    # ∂f/∂w = 1/w = 3/10;  ∂w/∂v = 1/y = 1/3;  ∂w/∂y = −v/y² = −10/9
    # ∂f/∂v = 3/10 · 1/3 = 1/10
    # ∂f/∂x = ∂f/∂v · (∂u/∂x + ∂(x²)/∂x) = 1/10 · (y + 2x) = 1/10 · 7 = 0.7
    # ∂f/∂y = ∂f/∂v · ∂u/∂y + ∂f/∂w · ∂w/∂y + relu'(y) = 1/10·2 − 3/10·10/9 + 1 = 13/15
    x, y = Value(2.0), Value(3.0)
    u = x * y
    v = u + x ** 2
    w = v / y
    f = w.log() + y.relu()
    f.backward()
    assert f.data == approx(math.log(10 / 3) + 3)
    assert x.grad == approx(0.7)
    assert y.grad == approx(13 / 15)
    # intermediate gradients are kept too
    assert w.grad == approx(0.3)
    assert v.grad == approx(0.1)
    assert u.grad == approx(0.1)


def test_hand_derived_transcendental_expression():
    # g = σ(x)·tanh(x) + eˣ at x = 0: σ(0) = ½, tanh 0 = 0, e⁰ = 1, so g = 1
    # g' = σ'(0)·tanh 0 + σ(0)·tanh'(0) + e⁰ = ¼·0 + ½·1 + 1 = 1.5
    x = Value(0.0)
    g = x.sigmoid() * x.tanh() + x.exp()
    g.backward()
    assert g.data == approx(1.0)
    assert x.grad == approx(1.5)


def test_hand_derived_neuron():
    # n = w₁x₁ + w₂x₂ + b with x = (1, −2), w = (0.5, 0.25), b = 1  →  n = 0.5 − 0.5 + 1 = 1
    # o = tanh n = tanh 1;  do/dn = 1 − tanh²1
    # do/dw₁ = x₁·(1 − tanh²1), do/dw₂ = x₂·(1 − tanh²1), do/dx₁ = w₁·(1 − tanh²1), do/db = 1 − tanh²1
    x1, x2, w1, w2, b = Value(1.0), Value(-2.0), Value(0.5), Value(0.25), Value(1.0)
    o = (w1 * x1 + w2 * x2 + b).tanh()
    o.backward()
    d = 1 - math.tanh(1.0) ** 2
    assert o.data == approx(math.tanh(1.0))
    assert w1.grad == approx(1.0 * d)
    assert w2.grad == approx(-2.0 * d)
    assert x1.grad == approx(0.5 * d)
    assert x2.grad == approx(0.25 * d)
    assert b.grad == approx(d)


# (op, x, expected value, expected d/dx), each derived by hand
UNARY_CASES = [
    ("exp", lambda v: v.exp(), 1.0, math.e, math.e),                      # (eˣ)' = eˣ
    ("log", lambda v: v.log(), 2.0, math.log(2.0), 0.5),                  # (ln x)' = 1/x
    ("tanh", lambda v: v.tanh(), 0.5, math.tanh(0.5), 1 - math.tanh(0.5) ** 2),
    ("sigmoid", lambda v: v.sigmoid(), 0.0, 0.5, 0.25),                   # σ' = σ(1 − σ) = ¼
    ("sigmoid2", lambda v: v.sigmoid(), 2.0, 1 / (1 + math.exp(-2)),
     math.exp(-2) / (1 + math.exp(-2)) ** 2),
    ("relu+", lambda v: v.relu(), 2.0, 2.0, 1.0),
    ("relu-", lambda v: v.relu(), -1.0, 0.0, 0.0),
    ("square", lambda v: v ** 2, -3.0, 9.0, -6.0),                        # 2x
    ("cube", lambda v: v ** 3, 2.0, 8.0, 12.0),                           # 3x²
    ("inverse", lambda v: v ** -1, 4.0, 0.25, -1 / 16),                   # −1/x²
    ("sqrt", lambda v: v ** 0.5, 4.0, 2.0, 0.25),                         # 1/(2√x)
    ("neg", lambda v: -v, 3.0, -3.0, -1.0),
    ("radd", lambda v: 2 + v, 4.0, 6.0, 1.0),
    ("rsub", lambda v: 2 - v, 4.0, -2.0, -1.0),
    ("rmul", lambda v: 2 * v, 4.0, 8.0, 2.0),
    ("rdiv", lambda v: 2 / v, 4.0, 0.5, -2 / 16),                         # −2/x²
    ("rpow", lambda v: 2 ** v, 1.5, 2 ** 1.5, 2 ** 1.5 * math.log(2)),    # (aˣ)' = aˣ ln a
    ("add_const", lambda v: v + 2, 4.0, 6.0, 1.0),
    ("sub_const", lambda v: v - 2, 4.0, 2.0, 1.0),
    ("mul_const", lambda v: v * 2, 4.0, 8.0, 2.0),
    ("div_const", lambda v: v / 2, 4.0, 2.0, 0.5),
]


@pytest.mark.parametrize("name, fn, x, value, derivative", UNARY_CASES, ids=[c[0] for c in UNARY_CASES])
def test_unary_ops_and_reversed_operators(name, fn, x, value, derivative):
    v = Value(x)
    out = fn(v)
    out.backward()
    assert out.data == approx(value)
    assert v.grad == approx(derivative)


@pytest.mark.parametrize("op, value, dx, dy", [
    (lambda a, b: a + b, 3.0 + -2.0, 1.0, 1.0),
    (lambda a, b: a - b, 3.0 - -2.0, 1.0, -1.0),
    (lambda a, b: a * b, 3.0 * -2.0, -2.0, 3.0),        # d(xy) = y dx + x dy
    (lambda a, b: a / b, 3.0 / -2.0, -0.5, -3.0 / 4),   # d(x/y) = dx/y − x dy/y²
], ids=["add", "sub", "mul", "div"])
def test_binary_ops(op, value, dx, dy):
    a, b = Value(3.0), Value(-2.0)
    out = op(a, b)
    out.backward()
    assert out.data == approx(value)
    assert a.grad == approx(dx)
    assert b.grad == approx(dy)


def test_sigmoid_does_not_overflow():
    low, high = Value(-1000.0).sigmoid(), Value(1000.0).sigmoid()
    assert low.data == 0.0 and high.data == 1.0


def test_node_used_twice_accumulates():
    # b = a·a → db/da = 2a = 6;  c = a + a → dc/da = 2
    a = Value(3.0)
    b = a * a
    b.backward()
    assert b.data == 9.0 and a.grad == 6.0
    a2 = Value(3.0)
    c = a2 + a2
    c.backward()
    assert c.data == 6.0 and a2.grad == 2.0


def test_reused_intermediate_node():
    # x = 2; y = x + 1 = 3 used twice: z = y·y + y = 12;  dz/dy = 2y + 1 = 7;  dz/dx = 7
    x = Value(2.0)
    y = x + 1
    z = y * y + y
    z.backward()
    assert z.data == 12.0
    assert y.grad == 7.0
    assert x.grad == 7.0


def test_pow_rejects_value_exponent():
    with pytest.raises(TypeError):
        Value(2.0) ** Value(3.0)


def test_chain_of_20000_ops():
    # f = x + 1 + 1 + … (20,000 times): value x + 20000, derivative 1; no recursion limit
    x = Value(1.0)
    y = x
    for _ in range(20_000):
        y = y + 1
    y.backward()
    assert y.data == 20_001.0
    assert x.grad == 1.0


def test_long_multiplicative_chain():
    # f = x·k^n, so df/dx = k^n, with n = 20,000 and k close to 1
    k, n = 1.00005, 20_000
    x = Value(1.0)
    y = x
    for _ in range(n):
        y = y * k
    y.backward()
    assert x.grad == pytest.approx(k ** n, rel=1e-9)


def test_gradients_accumulate_across_backward_calls_until_zeroed():
    # f = x·y at (2, 5): ∂f/∂x = 5. Two backward() calls through two graphs leave 10; zeroing restarts.
    x, y = Value(2.0), Value(5.0)
    (x * y).backward()
    (x * y).backward()
    assert x.grad == 10.0 and y.grad == 4.0
    for p in (x, y):
        p.grad = 0.0
    (x * y).backward()
    assert x.grad == 5.0 and y.grad == 2.0
    assert "ACCUMULATE" in Value.backward.__doc__ and "p.grad = 0.0" in Value.backward.__doc__


def test_backward_twice_through_one_graph_adds_the_same_gradient_again():
    # f = (x·y)·x at (2, 5): ∂f/∂x = 2xy = 20, ∂f/∂y = x² = 4; the product node's grad is ∂f/∂(xy) = x = 2
    x, y = Value(2.0), Value(5.0)
    xy = x * y
    f = xy * x
    f.backward()
    f.backward()
    assert x.grad == 40.0 and y.grad == 8.0
    assert xy.grad == 2.0 and f.grad == 1.0  # computed nodes: this call's gradient, not a running sum


def test_node_records_inputs_op_and_local_derivatives():
    # out = a·b at (3, −2): inputs (a, b), ∂out/∂a = b = −2, ∂out/∂b = a = 3; tanh' = 1 − tanh²
    a, b = Value(3.0), Value(-2.0)
    out = a * b
    assert out.inputs == (a, b) and out.local_grads == (-2.0, 3.0)
    assert out.op.name == "*" and out.op.rule == "∂out/∂a = b, ∂out/∂b = a"
    t = a.tanh()
    assert t.inputs == (a,) and t.op.name == "tanh" and t.local_grads == (1 - math.tanh(3.0) ** 2,)
    assert (a / b).inputs[1].op.name == "**-1"  # x / y is x · y⁻¹
    assert a.inputs == () and a.local_grads == () and a.op is None  # a leaf, as a Tensor leaf's op is None


def test_name_is_the_tensors_word_and_label_micrographs():
    # micrograd writes Value(2.0, label="x"); the attribute is `name`, as on a Tensor, and `label` reads and writes it
    x = Value(2.0, label="x")
    assert x.name == "x" and x.label == "x"
    x.label = "x1"
    assert x.name == "x1"
    y = Value(3.0, name="y")
    y.name = "w"
    assert y.label == "w" and Value(1.0).name is None and Tensor([1.0]).name is None


def test_topological_order_is_backwards_order_as_for_a_tensor():
    # d = (a + 1)·(a·a): d first, each node before its inputs, a last; the same graph on Tensors gives the same order
    a = Value(2.0)
    b, c = a + 1, a * a
    d = b * c
    order = d.topological_order()
    assert [id(v) for v in order] == [id(d), id(b), id(b.inputs[1]), id(c), id(a)]  # b.inputs[1]: the constant 1
    ta = Tensor([2.0], requires_grad=True)
    tb, tc = ta + 1, ta * ta
    td = tb * tc
    # the Tensor's sort lists only what needs a gradient: the constant 1 is left out, the rest agrees node for node
    assert [id(t) for t in topological_order(td)] == [id(td), id(tb), id(tc), id(ta)]


def test_topological_order_agrees_with_the_tensor_sort_on_a_tangled_graph():
    # the same expression on both engines, each intermediate reused: every node sits at the same position
    def tangled(a, b):
        u = a * b
        v = (u + a).tanh()
        w = v * u + b * v
        return (w * a + u).exp() * (v + w)

    value_order = tangled(Value(0.3), Value(-0.7)).topological_order()
    tensor_order = topological_order(tangled(Tensor(0.3, requires_grad=True, dtype="float64"),
                                             Tensor(-0.7, requires_grad=True, dtype="float64")))
    assert len(value_order) == len(tensor_order) == 13  # a, b and 11 results
    assert [v.data for v in value_order] == pytest.approx([t.item() for t in tensor_order], rel=1e-12)
    assert [v.op.name if v.op else None for v in value_order] == \
           [{"Add": "+", "Mul": "*", "Tanh": "tanh", "Exp": "exp"}[t.op.name] if t.op else None for t in tensor_order]


def test_graph_has_no_reference_cycles():
    # With the collector off only reference counts free objects: a graph that held a cycle would outlive `del`.
    # Counting the Values left, not what gc.collect() finds, keeps other threads' garbage (pytest-xdist's) out of it.
    # By type, not isinstance: isinstance reads a weak proxy's referent, and a dead one (another library's) raises.
    import gc

    def values_alive():
        return sum(issubclass(type(o), Value) for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        before = values_alive()
        x = Value(0.5)
        y = x
        for i in range(200):
            y = (y * x + i).tanh()
        y.backward()
        del x, y
        assert values_alive() == before
    finally:
        gc.enable()


def test_each_node_is_one_object_for_the_collector():
    # The collector walks every live object that can hold others; a graph of n ops must add n of them
    # (the Values), not 2n or 3n (with tuples of inputs and of derivatives beside each), which cost
    # micrograd's demo step 1.7 full collections instead of 0.7.
    import gc
    x, y = Value(0.5), Value(-1.5)
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        nodes = [(x * y + x).relu() for _ in range(1000)]  # 3 ops each
        grown = len(gc.get_objects()) - before
    finally:
        gc.enable()
    assert 3000 <= grown <= 3010  # the 3000 Values and the list holding them
    assert nodes[0].inputs[0].inputs[0].inputs == (x, y)


def test_diamond_graph_visits_each_node_once_after_all_its_consumers():
    # a feeds b and c; d = b·c. With a = 2: b = a + 1 = 3, c = a·a = 4, d = 12.
    # ∂d/∂a = c·1 + b·2a = 4 + 12 = 16; counted once although a is reached by two paths.
    a = Value(2.0)
    b, c = a + 1, a * a
    d = c * b
    d.backward()
    assert d.data == 12.0 and a.grad == 16.0


@pytest.mark.parametrize("base, k", [(-8.0, 1 / 3), (0.0, 0.5), (0.0, -1)])
def test_a_power_with_no_real_value_or_derivative_says_so(base, k):
    with pytest.raises(ValueError, match=rf"Value \*\* {k}: at {base}, .* is not a real number"):
        Value(base) ** k


def test_the_zeroth_power_has_derivative_zero_even_at_zero():
    x = Value(0.0)
    y = x ** 0
    y.backward()
    assert (y.data, x.grad) == (1.0, 0.0)


def test_a_number_to_a_value_power_has_its_second_derivative_too():
    x = Value(1.5)
    y = 3 ** x
    y.backward(create_graph=True)
    first, x.grad = x.grad, 0.0
    assert first.data == approx(3 ** 1.5 * math.log(3))
    first.backward()
    assert x.grad == approx(3 ** 1.5 * math.log(3) ** 2)  # (aˣ)'' = aˣ (ln a)²
    h = 1e-4
    assert abs(x.grad - (3 ** (1.5 + h) - 2 * 3 ** 1.5 + 3 ** (1.5 - h)) / h ** 2) < 1e-6  # finite differences


@pytest.mark.parametrize("base", [0, -2.0])
def test_a_number_to_a_value_power_refuses_a_base_with_no_real_logarithm(base):
    with pytest.raises(ValueError) as info:
        base ** Value(1.0)
    assert str(info.value) == (f"{base} ** Value: the derivative in the exponent, {base} ** x · ln {base}, is not a "
                               "real number for a base ≤ 0; use a positive base")


def test_a_str_is_not_a_number():
    """float() would take '1.5': Value('1.5') and Value(1) + '2' computed with the strings' values."""
    for make in (lambda: Value("1.5"), lambda: Value(1j)):
        with pytest.raises(TypeError, match="Value takes a real number, got"):
            make()
    assert (Value(3) ** np.int64(2)).data == 9.0 and (Value(1) + np.float32(0.5)).data == 1.5


@pytest.mark.parametrize("op, make", [
    ("+", lambda x, b: x + b), ("+", lambda x, b: b + x), ("*", lambda x, b: x * b), ("*", lambda x, b: b * x),
    ("-", lambda x, b: x - b), ("-", lambda x, b: b - x), ("/", lambda x, b: x / b), ("/", lambda x, b: b / x),
])
@pytest.mark.parametrize("operand, shown", [("2", "str operand '2'"), ([1.0], "list operand [1.0]"),
                                            (1j, "complex operand 1j"), (None, "NoneType operand None")])
def test_an_operand_that_is_not_a_number_is_refused_naming_the_op(op, make, operand, shown):
    """x - '2' said "bad operand type for unary -" (a minus the learner never wrote), the others only "Value takes
    a real number": each names its own op now."""
    with pytest.raises(TypeError) as info:
        make(Value(2.0), operand)
    assert str(info.value) == f"Value {op}: cannot compute with a {shown}; use a Value or a real number"


@pytest.mark.parametrize("op, make", [("+", lambda x, t: x + t), ("*", lambda x, t: x * t),
                                      ("-", lambda x, t: x - t), ("/", lambda x, t: x / t)])
def test_a_tensor_operand_is_refused_not_read_as_a_number(op, make):
    """Value(3) * t took float(t): the product was right and t.grad stayed None after backward, with no word
    (t * Value(3) refuses, in Tensor's words)."""
    t = Tensor(np.array(2.0), requires_grad=True)
    with pytest.raises(TypeError) as info:
        make(Value(3.0), t)
    assert str(info.value) == (f"Value {op}: cannot compute with a Tensor operand, whose gradient would be lost; "
                               "use Tensors throughout, or t.item() for a one-element tensor's number as a constant")
    y = Value(3.0) * t.item()  # the fix the message gives: the number, as a constant
    y.backward()
    assert y.data == 6.0 and t.grad is None


def test_a_leafs_own_backward_adds_one_as_pytorch_does():
    x = Value(2.0)
    x.backward()
    x.backward()
    assert x.grad == 2.0
    y = Value(2.0)
    (y * y).backward()
    y.backward()
    assert y.grad == 5.0


def test_repr_after_create_graph_shows_the_grads_value():
    x = Value(0.5)
    x.tanh().backward(create_graph=True)
    assert repr(x) == f"Value(data=0.5, grad=Value(data={1 - math.tanh(0.5) ** 2:.6g}))"


def test_relu_passes_nan_on_and_sigmoid_keeps_its_digits_far_below_zero():
    assert math.isnan(Value(float("nan")).relu().data)
    for x in (-20.0, -37.0, -40.0, 3.0):
        s = Value(x).sigmoid()
        exact = 1 / (1 + math.exp(-x))
        assert s.data == pytest.approx(exact, rel=1e-15)
        assert s.da == pytest.approx(exact * (1 - exact), rel=1e-15)


def test_second_derivatives_start_at_zero_where_the_first_does():
    x = Value(0.0)
    (x ** 0).backward(create_graph=True)
    assert x.grad.data == 0.0
    y = Value(0.0)
    (y ** 1.5).backward(create_graph=True)
    g = y.grad
    assert g.data == 0.0
    y.grad = 0.0
    g.backward()
    assert y.grad == math.inf  # 0.75 · 0^−½, as PyTorch gives it


@pytest.mark.parametrize("make, error, message", [
    (lambda: Value(0.0).log(), ValueError, "Value.log: the log of 0 is not a real number; x must be > 0"),
    (lambda: Value(1000.0).exp(), OverflowError, "Value.exp: e \\*\\* 1000 is beyond a float's range"),
    (lambda: Value(1e200) ** 2, OverflowError, "Value \\*\\* 2: 1e\\+200 \\*\\* 2 is beyond a float's range"),
    (lambda: Value(1.0) / 0, ZeroDivisionError, "Value /: division of 1 by 0"),
    # 1e-200 ** -1 = 1e200 is a float; its derivative, −1e400, is not (the message blamed the power)
    (lambda: 3 / Value(1e-200), OverflowError,
     "Value \\*\\* -1: at 1e-200, the derivative -1 · x \\*\\* -2 is beyond a float's range"),
    # 10 ** x is e^(x ln 10) inside: the message named Value.exp and e ** 921.034, which the learner never wrote
    (lambda: 10 ** Value(400.0), OverflowError, "^10 \\*\\* Value: 10 \\*\\* 400 is beyond a float's range$"),
])
def test_math_errors_name_the_value_op(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_tensor_sigmoid_keeps_its_digits_far_below_zero_as_value_does():
    x = Tensor(np.array([-40.0, -30.0, 0.0, 30.0]), requires_grad=True)
    z = x.sigmoid()
    exact = 1 / (1 + np.exp(-x.numpy()))
    np.testing.assert_allclose(z.numpy(), exact, rtol=1e-15)
    z.sum().backward()
    np.testing.assert_allclose(x.grad, exact * (1 - exact), rtol=1e-14)


def test_a_0_d_array_is_a_number():
    assert Value(np.array(2.0)).data == 2.0 and Value(Tensor(3.0)).data == 3.0


@pytest.mark.parametrize("x", [20.0, 30.0, 37.0, 40.0])
def test_sigmoid_derivative_keeps_its_digits_far_above_zero_too(x):
    """σ'(x) = σ(x)·σ(−x) = e/(1 + e)² with e = e^−|x|, the same on both sides of 0. σ(1 − σ) lost the digits of
    1 − σ as σ neared 1: relative error 3.6e-8 at x = 20, 1e-3 at 30, and 0 in place of 8.5e-17 from x = 37;
    the create_graph path too, and the second derivative σ'' = σ'·(1 − 2σ) = e(e − 1)/(1 + e)³ with it."""
    e = math.exp(-x)
    for sign in (1, -1):
        v = Value(sign * x)
        v.sigmoid().backward()
        assert v.grad == pytest.approx(e / (1 + e) ** 2, rel=1e-15, abs=0)
        v.grad = 0.0
        v.sigmoid().backward(create_graph=True)
        first, v.grad = v.grad, 0.0
        assert first.data == pytest.approx(e / (1 + e) ** 2, rel=1e-15, abs=0)
        first.backward()
        assert v.grad == pytest.approx(sign * e * (e - 1) / (1 + e) ** 3, rel=1e-14, abs=0)


def test_create_graphs_seed_is_a_constant_not_a_leaf_to_train():
    """The gradient's graph holds backward's seed, d(out)/d(out) = 1: a plain Value made it a leaf like a weight
    (viz.graph --double drew it green, and its own backward gave it a gradient)."""
    x = Value(0.5, name="x")
    x.tanh().backward(create_graph=True)
    leaves = [v for v in x.grad.topological_order() if not v.inputs]
    assert [v for v in leaves if not isinstance(v, Constant)] == [x]
    assert [v.data for v in leaves if isinstance(v, Constant)].count(1.0) == 2  # tanh's 1 − out², and the seed
