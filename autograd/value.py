"""Value: a scalar that remembers how it was computed — the whole idea of autograd in one short file.

An op has one or two inputs, `a` and `b`; its result keeps them and their local
derivatives ∂out/∂a, ∂out/∂b (`da`, `db`; `inputs` and `local_grads` read them
as tuples, as on a Tensor's op). `backward()` orders the graph topologically and
walks it from the output back, adding local derivative × out.grad into each
input's grad (adding: an input used twice receives both contributions).
`Tensor` tells the same story with arrays, in the same words: `name`, `op` (its
`name`, `rule`), `inputs`, `topological_order()`. (Why a node is one object with
slots, not a Value and tuples: the note at the end of this file.)

`backward(create_graph=True)` runs the same loop in Values: each op's `d`
gives its local derivatives as Values (the floats `da`, `db` spelled as
expressions of the graph), so every grad is a Value with a graph of its own and
can be differentiated again. For y = tanh x: x.grad = 1 − y², and its backward
gives d²y/dx² = −2y(1 − y²).
"""
import functools
import math
import numbers
from collections import namedtuple

# What made a Value, read as a Tensor's op is: its name, its local derivatives (the rule), and `d`, those
# derivatives as Values of the graph for create_graph: d(out) -> (∂out/∂a, ∂out/∂b), out the node itself
Op = namedtuple("Op", "name rule d")
ADD = Op("+", "∂out/∂a = 1, ∂out/∂b = 1", lambda out: (1, 1))
MUL = Op("*", "∂out/∂a = b, ∂out/∂b = a", lambda out: (out.b, out.a))
EXP = Op("exp", "∂out/∂x = eˣ = out", lambda out: (out,))
LOG = Op("log", "∂out/∂x = 1/x", lambda out: (out.a ** -1,))
TANH = Op("tanh", "∂out/∂x = 1 − out²", lambda out: (1 - out * out,))
SIGMOID = Op("sigmoid", "∂out/∂x = out·(1 − out) = σ(x)·σ(−x)", lambda out: (out * (-out.a).sigmoid(),))
RELU = Op("relu", "∂out/∂x = 1[x > 0]", lambda out: (out.da,))  # 0 or 1: flat on either side of 0
POW_RULE = "∂out/∂x = k·x^(k−1)"


@functools.lru_cache(maxsize=128, typed=True)  # one Op per exponent: no new objects per x ** k for the collector
def _power(k):
    return Op(f"**{k}", POW_RULE, lambda out: (k * _derivative_power(out.a, k - 1),) if k else (0.0,))


def _derivative_power(x, k):
    """x ** k as a node of create_graph's derivative graph, where x ** (k + 1) was allowed: at x = 0 with
    0 < k < 1 it is 0 and its own derivative infinite (x^1.5's second derivative at 0, as PyTorch gives it),
    where `**` refuses to start from such a point."""
    if x.data == 0 and 0 < k < 1:
        return _result(0.0, _power(k), x, math.inf)
    return x ** k


class Value:
    __slots__ = ("data", "grad", "op", "a", "da", "b", "db", "name")

    def __init__(self, data, name=None, label=None):  # a leaf; an op's result comes from `_result`
        # a real number, NumPy's included (a 0-d array too): float() alone would take '1.5', and x + '2' would add 2
        try:
            if isinstance(data, (str, bytes)):
                raise TypeError
            self.data = float(data)
        except (TypeError, ValueError):
            raise TypeError(f"Value takes a real number, got {type(data).__name__} {data!r}") from None
        self.grad = 0.0
        self.op = None           # the Op that made it (None for a leaf)
        self.a = self.b = None   # its inputs: first, second (None where it has fewer)
        self.da = self.db = 0.0  # ∂self/∂a and ∂self/∂b at this point
        self.name = label if name is None else name  # for pictures: "x1", "w1", …; `label=` is micrograd's word

    label = property(lambda self: self.name, lambda self, name: setattr(self, "name", name))  # micrograd's name
    inputs = property(lambda self: tuple(x for x in (self.a, self.b) if x is not None))  # as a Tensor's op has them
    local_grads = property(lambda self: (self.da, self.db)[:len(self.inputs)])  # ∂self/∂input for each input

    def __repr__(self):
        grad = self.grad  # a Value itself after backward(create_graph=True)
        grad = f"Value(data={grad.data:.6g})" if isinstance(grad, Value) else f"{grad:.6g}"
        return f"Value(data={self.data:.6g}, grad={grad})"

    def __add__(self, other):  # ∂out/∂self = 1, ∂out/∂other = 1
        other = other if isinstance(other, Value) else _constant(other, "+")
        return _result(self.data + other.data, ADD, self, 1.0, other, 1.0)

    def __mul__(self, other):  # ∂out/∂self = other, ∂out/∂other = self
        other = other if isinstance(other, Value) else _constant(other, "*")
        return _result(self.data * other.data, MUL, self, other.data, other, self.data)

    def __pow__(self, k):  # ∂out/∂self = k · self^(k−1)
        if isinstance(k, bool) or not isinstance(k, numbers.Real):
            raise TypeError(f"Value ** takes a number as exponent, got {type(k).__name__}; "
                            f"for x ** y with y a Value write (y * x.log()).exp()")
        k = int(k) if isinstance(k, numbers.Integral) else float(k)  # NumPy's numbers as Python's
        if self.data < 0 and not float(k).is_integer() or self.data == 0 and k < 1 and k != 0:
            raise ValueError(f"Value ** {k}: at {self.data}, x ** {k} or its derivative {k} · x ** {k - 1} is not "
                             "a real number (a negative base's fractional power, or a division by 0)")
        try:
            out = float(self.data ** k)
        except OverflowError:
            raise OverflowError(f"Value ** {k}: {self.data:g} ** {k} is beyond a float's range") from None
        try:  # the power may be a float where its derivative is not: 1e-200 ** -1 = 1e200, its derivative −1e400
            return _result(out, _power(k), self, k * self.data ** (k - 1) if k else 0.0)
        except OverflowError:
            raise OverflowError(f"Value ** {k}: at {self.data:g}, the derivative {k} · x ** {k - 1} is beyond "
                                "a float's range") from None

    def exp(self):  # (eˣ)' = eˣ
        try:
            e = math.exp(self.data)
        except OverflowError:
            raise OverflowError(f"Value.exp: e ** {self.data:g} is beyond a float's range (x ≤ 709.78)") from None
        return _result(e, EXP, self, e)

    def log(self):  # (ln x)' = 1/x
        if not self.data > 0:
            raise ValueError(f"Value.log: the log of {self.data:g} is not a real number; x must be > 0")
        return _result(math.log(self.data), LOG, self, 1 / self.data)

    def tanh(self):  # tanh' = 1 − tanh²
        t = math.tanh(self.data)
        return _result(t, TANH, self, 1 - t * t)

    def sigmoid(self):  # σ' = σ(1 − σ) = σ(x)·σ(−x): 1 − σ would cancel as σ nears 1, σ(−x) does not
        e = math.exp(-abs(self.data))  # never overflows; 1 − e or e/(1 + e) would cancel for x ≪ 0, this does not
        high, low = 1 / (1 + e), e / (1 + e)  # σ(|x|), σ(−|x|)
        return _result(high if self.data >= 0 else low, SIGMOID, self, high * low)

    def relu(self):  # 1 where x > 0, else 0; NaN passes on, as in PyTorch
        x = self.data
        return _result(0.0 if x <= 0 else x, RELU, self, 1.0 if x > 0 else 0.0)

    __radd__ = __add__  # other + self is self + other, and other · self is self · other
    __rmul__ = __mul__
    def __neg__(self): return self * -1
    # a number is negated as a number (x − 3 adds the Constant −3), a Value by a node (−1 · other)
    def __sub__(self, other): return self + (-other if isinstance(other, Value) else -_constant(other, "-").data)
    def __rsub__(self, other): return _constant(other, "-") - self
    def __rtruediv__(self, other): return _constant(other, "/") / self

    def __truediv__(self, other):
        other = other if isinstance(other, Value) else _constant(other, "/")
        if other.data == 0:
            raise ZeroDivisionError(f"Value /: division of {self.data:g} by 0")
        return self * other ** -1

    def __rpow__(self, base):  # base ** x = e^(x ln base), so ∂out/∂x = base^x · ln base
        if isinstance(base, bool) or not isinstance(base, numbers.Real):
            return NotImplemented
        if base <= 0:
            raise ValueError(f"{base} ** Value: the derivative in the exponent, {base} ** x · ln {base}, is not a "
                             "real number for a base ≤ 0; use a positive base")
        try:
            return (self * math.log(base)).exp()
        except OverflowError:  # name the power the learner wrote, not the exp it is computed by
            raise OverflowError(f"{base} ** Value: {base} ** {self.data:g} is beyond a float's range") from None

    def topological_order(self):
        """Every Value below self, each before the Values it was computed from (self first): the order
        backward visits them, node for node the order `autograd.topological_order` gives a Tensor's graph."""
        order, seen, stack = [], {self}, [self]
        while True:  # depth-first, iterative (long chains need no recursion); b first, as the Tensor's sort
            v = stack[-1]
            if v.b is not None and v.b not in seen:
                seen.add(v.b)
                stack.append(v.b)
            elif v.a is not None and v.a not in seen:
                seen.add(v.a)
                stack.append(v.a)
            else:  # v's inputs are all in `order`: v can follow them
                order.append(stack.pop())
                if not stack:  # not `while stack:`, whose loop CPython 3.11 leaves unspecialized for 8 calls
                    break
        order.reverse()
        return order

    def backward(self, create_graph=False):
        """Add d(self)/d(v) into every leaf v's `.grad`; computed nodes get this call's gradient.

        Leaf gradients ACCUMULATE: a second backward() (through the same graph or
        a new one) adds to what the first left there, as in micrograd and
        PyTorch. Zero them before each step: `for p in params: p.grad = 0.0`.
        A computed node (one with inputs) holds d(self)/d(node) of the latest call.
        With `create_graph`, every grad is a Value with a graph: `g = x.grad; x.grad = 0.0;
        g.backward()` leaves the second derivative in x.grad.
        """
        order = self.topological_order()
        for v in order:
            if v.op is not None:
                v.grad = 0.0
        one = Constant(1.0) if create_graph else 1.0  # d(self)/d(self): a number of the graph, not a leaf to train
        # the root's own gradient, 1: added to what a leaf holds (x.backward() twice gives 2, as in PyTorch)
        self.grad = self.grad + one if self.op is None and (isinstance(self.grad, Value) or self.grad) else one
        if create_graph:
            for v in order:  # the loop below, in Values: each local derivative × grad is a node of the graph
                for x, d in zip(v.inputs, v.op.d(v) if v.op is not None else ()):
                    term = v.grad if d == 1 else d * v.grad  # an Add's 1 adds no node
                    x.grad = x.grad + term if isinstance(x.grad, Value) or x.grad else term
            return
        for v in order:  # every consumer of v comes before v: its grad is complete
            if v.a is not None:
                v.a.grad += v.da * v.grad
            if v.b is not None:
                v.b.grad += v.db * v.grad


class Constant(Value):
    """A leaf that is never trained: a data point, a label, a hyper-parameter, a number written in the formula
    (x + 1 makes the 1 one). Backward treats it as any leaf; it only says what the number is, and viz draws it
    as a constant, without the gradient nothing reads."""
    __slots__ = ()


def _constant(other, op):
    """`op`'s operand that is not a Value, a number, as a Constant (x + 1 makes the 1 one). A Tensor is refused:
    its number alone would enter the graph, and no gradient would reach the tensor."""
    if hasattr(other, "requires_grad"):  # a Tensor (ours or another library's), not a number of this graph
        raise TypeError(f"Value {op}: cannot compute with a {type(other).__name__} operand, whose gradient would be lost; "
                        "use Tensors throughout, or t.item() for a one-element tensor's number as a constant")
    try:
        return Constant(other)
    except TypeError:
        raise TypeError(f"Value {op}: cannot compute with a {type(other).__name__} operand {other!r}; "
                        "use a Value or a real number") from None


def _result(data, op, a, da, b=None, db=0.0):
    """A Value computed by `op` from a (and b), with ∂/∂a = da (and ∂/∂b = db). Its slots are filled here,
    not by calling the class: in CPython a class call packs its arguments into a tuple and dispatches to
    __init__, a sixth of the time of micrograd's demo forward pass."""
    out = object.__new__(Value)
    out.data, out.grad, out.op = data, 0.0, op
    out.a, out.da = a, da
    out.b, out.db = b, db
    out.name = None
    return out


"""Why one object per node. A node points only at its inputs, so a dropped graph is freed at once, no cycle
left to collect; but Python's collector walks every live object that can hold others as a graph grows, so a
node is one object (its inputs and their derivatives in slots), not three (a Value and tuples of inputs and
derivatives): on micrograd's demo step the collector's share fell from 42 % (1.7 full passes a step) to 30 %
(0.7), and the step runs 12.5× faster than micrograd's (benchmarks/value_vs_micrograd.py)."""
