"""Value: a scalar that remembers how it was computed — the whole idea of autograd in one screen.

Each op computes its result and, beside it, its local derivatives ∂out/∂input,
one per input, stored on the result (`local_grads`). `backward()` orders the
graph topologically and walks it from the output back, adding
local derivative × out.grad into each input's grad (adding, because an input
used twice must receive both contributions). A node points only at its inputs,
never back at itself, so a graph is freed the moment it is dropped, with no
work left for the garbage collector. `Tensor` is the same story with arrays,
and the same words: `name`, `op` (with its `name` and `rule`), `inputs`,
`topological_order()`.
"""
import math
from collections import namedtuple

Op = namedtuple("Op", "name rule")  # what made a Value, read as a Tensor's op is: its name, its local derivatives
ADD, MUL = Op("+", "∂out/∂a = 1, ∂out/∂b = 1"), Op("*", "∂out/∂a = b, ∂out/∂b = a")
EXP, LOG = Op("exp", "∂out/∂x = eˣ = out"), Op("log", "∂out/∂x = 1/x")
TANH, SIGMOID = Op("tanh", "∂out/∂x = 1 − out²"), Op("sigmoid", "∂out/∂x = out·(1 − out)")
RELU = Op("relu", "∂out/∂x = 1[x > 0]")
POW_RULE = "∂out/∂x = k·x^(k−1)"


class Value:
    __slots__ = ("data", "grad", "inputs", "local_grads", "op", "name")

    def __init__(self, data, inputs=(), local_grads=(), op=None, name=None, label=None):
        self.data = float(data)
        self.grad = 0.0
        self.inputs = inputs            # the Values this one was computed from
        self.local_grads = local_grads  # ∂self/∂input for each of them, at this point
        self.op = op                    # the Op that made it (None for a leaf)
        self.name = label if name is None else name  # for pictures: "x1", "w1", …; `label=` is micrograd's word

    label = property(lambda self: self.name, lambda self, name: setattr(self, "name", name))  # micrograd's name

    def __repr__(self):
        return f"Value(data={self.data:.6g}, grad={self.grad:.6g})"

    def __add__(self, other):  # ∂out/∂self = 1, ∂out/∂other = 1
        other = other if isinstance(other, Value) else Value(other)
        return Value(self.data + other.data, (self, other), (1.0, 1.0), ADD)

    def __mul__(self, other):  # ∂out/∂self = other, ∂out/∂other = self
        other = other if isinstance(other, Value) else Value(other)
        return Value(self.data * other.data, (self, other), (other.data, self.data), MUL)

    def __pow__(self, k):  # ∂out/∂self = k · self^(k−1)
        if not isinstance(k, (int, float)):
            raise TypeError(f"Value ** takes a number as exponent, got {type(k).__name__}; "
                            f"for x ** y with y a Value write (y * x.log()).exp()")
        return Value(self.data ** k, (self,), (k * self.data ** (k - 1),), Op(f"**{k}", POW_RULE))

    def exp(self):  # (eˣ)' = eˣ
        e = math.exp(self.data)
        return Value(e, (self,), (e,), EXP)

    def log(self):  # (ln x)' = 1/x
        return Value(math.log(self.data), (self,), (1 / self.data,), LOG)

    def tanh(self):  # tanh' = 1 − tanh²
        t = math.tanh(self.data)
        return Value(t, (self,), (1 - t * t,), TANH)

    def sigmoid(self):  # σ' = σ(1 − σ)
        s = 0.5 * (math.tanh(0.5 * self.data) + 1)  # 1/(1+e^−x) without overflow
        return Value(s, (self,), (s * (1 - s),), SIGMOID)

    def relu(self):  # 1 where x > 0, else 0
        if self.data > 0:
            return Value(self.data, (self,), (1.0,), RELU)
        return Value(0.0, (self,), (0.0,), RELU)

    def __neg__(self): return self * -1
    def __sub__(self, other): return self + (-other)
    def __truediv__(self, other): return self * other ** -1
    def __radd__(self, other): return self + other
    def __rsub__(self, other): return Value(other) - self
    def __rmul__(self, other): return self * other
    def __rtruediv__(self, other): return Value(other) / self

    def topological_order(self):
        """Every Value below self, each before the Values it was computed from (self first): the order
        backward visits them, node for node the order `autograd.topological_order` gives a Tensor's graph."""
        order, seen, stack = [], {self}, [(self, reversed(self.inputs))]
        while stack:  # depth-first, iterative: long chains need no recursion
            v, inputs = stack[-1]
            for child in inputs:  # resume v's inputs (last first, as the Tensor's sort) where we left off
                if child not in seen:  # descend into the first one not yet visited
                    seen.add(child)
                    stack.append((child, reversed(child.inputs)))
                    break
            else:  # v's inputs are all in `order`: v can follow them
                stack.pop()
                order.append(v)
        order.reverse()
        return order

    def backward(self):
        """Add d(self)/d(v) into every leaf v's `.grad`; computed nodes get this call's gradient.

        Leaf gradients ACCUMULATE: a second backward() (through the same graph or
        a new one) adds to what the first left there, as in micrograd and
        PyTorch. Zero them before each step: `for p in params: p.grad = 0.0`.
        A computed node (one with inputs) holds d(self)/d(node) of the latest call.
        """
        order = self.topological_order()
        for v in order:
            if v.inputs:
                v.grad = 0.0
        self.grad = 1.0
        for v in order:  # every consumer of v comes before v: its grad is complete
            for child, local in zip(v.inputs, v.local_grads):
                child.grad += local * v.grad
