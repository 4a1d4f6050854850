"""Value: a scalar that remembers how it was computed — the whole idea of autograd in one screen.

Each op computes its result and stores a small `_backward` that applies the
op's local derivative: it reads `out.grad` and *adds* into its inputs' grads
(adds, because an input used twice must receive both contributions).
`backward()` orders the graph topologically and runs those closures from the
output back. `Tensor` is the same story with arrays.
"""
import math


class Value:
    __slots__ = ("data", "grad", "_inputs", "_backward", "op")

    def __init__(self, data, _inputs=(), op=""):
        self.data = float(data)
        self.grad = 0.0
        self._inputs = _inputs
        self._backward = lambda: None
        self.op = op

    def __repr__(self):
        return f"Value(data={self.data:.6g}, grad={self.grad:.6g})"

    def __add__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        out = Value(self.data + other.data, (self, other), "+")

        def _backward():  # ∂out/∂self = 1, ∂out/∂other = 1
            self.grad += out.grad
            other.grad += out.grad
        out._backward = _backward
        return out

    def __mul__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        out = Value(self.data * other.data, (self, other), "*")

        def _backward():  # ∂out/∂self = other, ∂out/∂other = self
            self.grad += other.data * out.grad
            other.grad += self.data * out.grad
        out._backward = _backward
        return out

    def __pow__(self, exponent):
        if not isinstance(exponent, (int, float)):
            raise TypeError("Value ** only takes a number as exponent")
        out = Value(self.data ** exponent, (self,), f"**{exponent}")

        def _backward():  # ∂out/∂self = k · self^(k−1)
            self.grad += exponent * self.data ** (exponent - 1) * out.grad
        out._backward = _backward
        return out

    def _unary(self, result, local_derivative, op):
        """An op of one input: `local_derivative` is ∂out/∂self at this point."""
        out = Value(result, (self,), op)

        def _backward():
            self.grad += local_derivative * out.grad
        out._backward = _backward
        return out

    def exp(self):
        e = math.exp(self.data)
        return self._unary(e, e, "exp")

    def log(self):
        return self._unary(math.log(self.data), 1 / self.data, "log")

    def tanh(self):
        t = math.tanh(self.data)
        return self._unary(t, 1 - t * t, "tanh")

    def sigmoid(self):
        s = 0.5 * (math.tanh(0.5 * self.data) + 1)  # 1/(1+e^−x) without overflow
        return self._unary(s, s * (1 - s), "sigmoid")

    def relu(self):
        return self._unary(max(self.data, 0.0), float(self.data > 0), "relu")

    def __neg__(self): return self * -1
    def __sub__(self, other): return self + (-other)
    def __truediv__(self, other): return self * other ** -1
    def __radd__(self, other): return self + other
    def __rsub__(self, other): return Value(other) - self
    def __rmul__(self, other): return self * other
    def __rtruediv__(self, other): return Value(other) / self

    def backward(self):
        """Set every ancestor's `.grad` to d(self)/d(ancestor)."""
        order, visited, stack = [], set(), [(self, False)]
        while stack:  # depth-first, iterative: long chains need no recursion
            v, inputs_done = stack.pop()
            if inputs_done:
                order.append(v)
            elif v not in visited:
                visited.add(v)
                stack.append((v, True))
                stack.extend((child, False) for child in v._inputs)
        self.grad = 1.0
        for v in reversed(order):
            v._backward()
