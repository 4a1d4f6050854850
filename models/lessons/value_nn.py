"""Neurons, layers and an MLP made of `Value`s: chapter one's network, as micrograd builds it.

What this file promises:

* `Neuron(n_in)`: relu(Σᵢ wᵢxᵢ + b), or the bare sum when `relu=False`; weights
  drawn uniformly from [−1, 1], bias 0.
* `Layer(n_in, n_out)`: `n_out` neurons reading the same inputs.
* `MLP(DEMO_SIZES)`, [2, 16, 16, 1]: layers of ReLU neurons, the last one linear; called on
  a list of inputs it returns a `Value` (a list when the last layer is wider).
* `parameters()` and `zero_grad()` on all three; each parameter is labelled
  for pictures by where it sits: `L1.n0.w1` is layer 1, neuron 0, the weight
  on input 1 (`L2.n3.b` a bias).
* `max_margin_loss(model, points, labels)`: micrograd's demo loss and accuracy,
  and `train_step(...)`: one step of its training loop.

Every number is a `Value`, so `loss.backward()` reaches each weight through
the scalar graph. `nn` is the Tensor version of the same idea. Weights come
from `random.Random(seed)`: the same seed, the same network. `value=` makes
the same network of another micrograd-style Value class (the benchmark runs
it on micrograd's own, in a process that imports nothing of this engine).
"""
import random

DEMO_SIZES = [2, 16, 16, 1]  # micrograd's demo network: 2 inputs, two hidden layers of 16 ReLUs, one score


def _value_class(value, constant=False):
    """The engine's Value (or, with `constant`, its Constant: a number that is never trained); `value`,
    another engine's Value class, stands for both."""
    if value is None:  # here, not at the top: a process running micrograd's Value never loads this engine
        from autograd import Constant, Value
        return Constant if constant else Value
    return value


class Module:
    def parameters(self):
        return []

    def zero_grad(self):
        """Zero every parameter's grad: backward adds into it."""
        for p in self.parameters():
            p.grad = 0.0


class Neuron(Module):
    """relu(w · x + b), or w · x + b when relu=False."""

    def __init__(self, n_in, relu=True, rng=random, value=None, name="n"):
        Value = _value_class(value)
        self.w = [Value(rng.uniform(-1, 1)) for _ in range(n_in)]
        self.b = Value(0.0)
        self.relu = relu
        for i, w in enumerate(self.w):  # labels for pictures: viz.graph draws them on the boxes
            w.label = f"{name}.w{i}"
        self.b.label = f"{name}.b"

    def __call__(self, x):
        act = sum((wi * xi for wi, xi in zip(self.w, x)), self.b)
        return act.relu() if self.relu else act

    def parameters(self):
        return self.w + [self.b]

    def __repr__(self):
        return f"{'ReLU' if self.relu else 'Linear'}Neuron({len(self.w)})"


class Layer(Module):
    """n_out neurons, each reading all n_in inputs."""

    def __init__(self, n_in, n_out, relu=True, rng=random, value=None, name="layer"):
        self.neurons = [Neuron(n_in, relu, rng, value, f"{name}.n{j}") for j in range(n_out)]

    def __call__(self, x):
        out = [n(x) for n in self.neurons]
        return out[0] if len(out) == 1 else out

    def parameters(self):
        return [p for n in self.neurons for p in n.parameters()]

    def __repr__(self):
        return f"Layer of [{', '.join(str(n) for n in self.neurons)}]"


class MLP(Module):
    """Layers of the given sizes, [inputs, hidden…, outputs]: ReLU neurons, the last layer linear."""

    def __init__(self, sizes, seed=1337, value=None):
        if len(sizes) < 2 or any(not isinstance(n, int) or n < 1 for n in sizes):
            raise ValueError(f"MLP: sizes must be at least two positive integers [inputs, …, outputs], got {sizes}")
        rng = random.Random(seed)
        self.value = _value_class(value)
        self.constant = _value_class(value, constant=True)
        last = len(sizes) - 2
        self.layers = [Layer(n_in, n_out, relu=i != last, rng=rng, value=self.value, name=f"L{i + 1}")
                       for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:]))]

    def __call__(self, x):
        if len(x) != len(self.layers[0].neurons[0].w):
            raise ValueError(f"MLP: expected {len(self.layers[0].neurons[0].w)} inputs, got {len(x)}")
        for layer in self.layers:
            x = layer(x)
            x = x if isinstance(x, list) else [x]
        return x[0] if len(x) == 1 else x

    def parameters(self):
        return [p for layer in self.layers for p in layer.parameters()]

    def __repr__(self):
        return f"MLP of [{', '.join(str(layer) for layer in self.layers)}]"


def max_margin_loss(model, points, labels, alpha=1e-4):
    """micrograd's demo loss on labels ±1: mean over points of relu(1 − y·score), plus α·Σ p² (L2).

    A point counts as right when its score has the label's sign. Returns (loss, accuracy).
    """
    scores = [model([_labelled(model.constant(x), f"x{j + 1}") for j, x in enumerate(point)]) for point in points]
    # each operand where Python's operators put it (score · (−y), not −y · score): the graph, and so the
    # order in which backward adds up the gradients, is the one micrograd's demo builds
    margins = [(score * _labelled(model.constant(-y), "−y") + _labelled(model.constant(1.0), "1")).relu()
               for y, score in zip(labels, scores)]
    data_loss = sum(margins) * _labelled(model.constant(1.0 / len(margins)), "1/n")
    reg_loss = sum(p * p for p in model.parameters()) * _labelled(model.constant(alpha), "α")
    accuracy = sum((y > 0) == (score.data > 0) for y, score in zip(labels, scores)) / len(labels)
    return data_loss + reg_loss, accuracy


def _labelled(v, label):
    v.label = label  # for pictures: viz.graph draws it on the box
    return v


def train_step(model, points, labels, step, steps=100, alpha=1e-4):
    """One step of micrograd's demo: loss, zero_grad, backward, SGD with lr = 1 − 0.9·step/steps.

    Returns (loss, accuracy) before the update.
    """
    loss, accuracy = max_margin_loss(model, points, labels, alpha)
    model.zero_grad()
    loss.backward()
    lr = 1.0 - 0.9 * step / steps
    for p in model.parameters():
        p.data -= lr * p.grad
    return loss.data, accuracy
