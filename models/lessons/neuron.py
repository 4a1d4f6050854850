"""Chapter one's neuron on `Value`: o = tanh(x₁w₁ + x₂w₂ + b), with micrograd's lecture numbers.

What this file promises:

* `neuron()`: the lecture's graph, every node named as in the lecture:
  inputs x₁ = 2, x₂ = 0, weights w₁ = −3, w₂ = 1, bias b = 6.8813735870195432
  (chosen so that n = x₁w₁ + x₂w₂ + b = 0.8813735870…, where tanh n = 1/√2).
* After `o.backward()`, the lecture's gradients: do/dn = 1 − o² = 0.5, so
  do/dw₁ = x₁ · 0.5 = 1, do/dx₁ = w₁ · 0.5 = −1.5, do/dw₂ = x₂ · 0.5 = 0
  (x₂ is 0: w₂ cannot matter), do/dx₂ = w₂ · 0.5 = 0.5, do/db = 0.5.
* `demo_loss()`: o, a `Value`, for `python -m viz.graph models.neuron`.
* `tanh_derivatives(x)`: (d tanh/dx, d² tanh/dx²) at x from the engine:
  backward(create_graph=True) makes the first a Value, 1 − tanh²x, whose own
  backward gives the second, −2 tanh x (1 − tanh²x), to within 1e-12.

`python -m models.neuron` prints every node's data and grad after backward,
then d²o/dn² from the engine beside −2o(1 − o²).
"""
from autograd import Value
from models.cli import Parser

LECTURE = {"x1": 2.0, "x2": 0.0, "w1": -3.0, "w2": 1.0, "b": 6.8813735870195432}


def neuron():
    """The lecture's nodes by name, from the inputs to o = tanh(n); nothing is backpropagated yet."""
    nodes = {name: Value(value, name=name) for name, value in LECTURE.items()}

    def keep(name, value):
        value.name = name
        nodes[name] = value
        return value

    x1w1 = keep("x1*w1", nodes["x1"] * nodes["w1"])
    x2w2 = keep("x2*w2", nodes["x2"] * nodes["w2"])
    sum_ = keep("x1*w1 + x2*w2", x1w1 + x2w2)
    n = keep("n", sum_ + nodes["b"])
    keep("o", n.tanh())
    return nodes


def tanh_derivatives(x):
    """(d tanh/dx, d² tanh/dx²) at x: a backward with create_graph=True, then the backward of its gradient."""
    leaf = Value(x)
    leaf.tanh().backward(create_graph=True)
    first, leaf.grad = leaf.grad, 0.0  # a Value, 1 − tanh²x, with its graph; leaf.grad starts afresh
    first.backward()
    return first.data, leaf.grad


def demo_loss():
    """The neuron's output o = tanh(n) = 0.7071067811865476 (≈ 1/√2), a Value whose graph viz draws.

    (Its data is 0.7071067811865477 where libm's tanh, as glibc's, lands one unit in the last place high.)"""
    return neuron()["o"]


def main(argv=None):
    parser = Parser("python -m models.neuron", __doc__.split("\n")[0])
    parser.parse_args(argv)
    nodes = neuron()
    o = nodes["o"]
    o.backward()
    print("micrograd's lecture neuron: o = tanh(x1·w1 + x2·w2 + b), after o.backward()")
    width = max(len(name) for name in nodes)
    print(f"  {'node':<{width}}  {'data':>10}  {'grad = do/d(node)':>18}")
    for name, v in nodes.items():
        print(f"  {name:<{width}}  {v.data:>10.4f}  {v.grad:>18.4f}")
    print(f"  do/dn = 1 − o² = 1 − {o.data:.4f}² = {1 - o.data ** 2:.4f}")
    print("  a weight's gradient is its input times do/dn, an input's is its weight times do/dn")
    first, second = tanh_derivatives(nodes["n"].data)
    by_hand = -2 * o.data * (1 - o.data ** 2)
    print("backward is a graph too: with create_graph=True, do/dn is the Value 1 − o², and its own backward gives")
    # 15 decimals: the 16th carries tanh's rounding (exactly, d²o/dn² = −0.70710678118654745764… here)
    print(f"  d²o/dn² = {second:.15f} from the engine, −2o(1 − o²) = {by_hand:.15f} by hand "
          f"(they differ by {abs(second - by_hand):.1e})")


if __name__ == "__main__":
    main()
