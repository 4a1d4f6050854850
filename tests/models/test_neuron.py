"""models.neuron: micrograd's lecture neuron on Value, against the lecture's numbers worked out by hand."""
import math
import re
import subprocess
import sys
from decimal import Decimal, localcontext
from pathlib import Path

import pytest

from autograd import Value
from models.lessons import neuron

ROOT = Path(__file__).resolve().parents[2]


def test_forward_is_the_lectures():
    # n = 2·(−3) + 0·1 + 6.8813735870195432 = asinh(1), so o = tanh(asinh 1) = 1/√2
    nodes = neuron.neuron()
    assert nodes["x1*w1"].data == -6.0 and nodes["x2*w2"].data == 0.0
    assert nodes["n"].data == pytest.approx(math.asinh(1.0), abs=1e-15)
    assert nodes["o"].data == pytest.approx(1 / math.sqrt(2), abs=1e-15)
    assert all(v.name == name for name, v in nodes.items())
    assert nodes["o"].op.name == "tanh" and nodes["n"].op.name == "+" and nodes["x1*w1"].op.name == "*"
    assert nodes["x1"].op is None


def test_backward_gives_the_lectures_gradients():
    # do/dn = 1 − o² = 1/2; do/dw₁ = x₁/2 = 1, do/dx₁ = w₁/2 = −1.5, do/dw₂ = x₂/2 = 0, do/dx₂ = w₂/2 = 0.5
    nodes = neuron.neuron()
    nodes["o"].backward()
    expected = {"x1": -1.5, "w1": 1.0, "x2": 0.5, "w2": 0.0, "b": 0.5, "n": 0.5, "x1*w1": 0.5, "o": 1.0}
    for name, grad in expected.items():
        assert nodes[name].grad == pytest.approx(grad, abs=1e-12), name


def test_demo_loss_is_a_fresh_value_each_call():
    a, b = neuron.demo_loss(), neuron.demo_loss()
    assert isinstance(a, Value) and a is not b
    a.backward()
    assert b.grad == 0.0 and a.data == b.data


def test_command_prints_every_node():
    out = subprocess.run([sys.executable, "-m", "models.neuron"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:12]}
    assert rows["x1"] == ["2.0000", "-1.5000"] and rows["w1"] == ["-3.0000", "1.0000"]
    assert rows["o"] == ["0.7071", "1.0000"] and rows["b"] == ["6.8814", "0.5000"]
    assert "1 − 0.7071² = 0.5000" in out
    assert "d²o/dn² = -0.70710678118654" in out and "−2o(1 − o²) = -0.70710678118654" in out


def _exact_o():
    """o = tanh(x₁w₁ + x₂w₂ + b) at 50 digits, from the lecture's float inputs (b's double, not its decimal):
    (e²ⁿ − 1)/(e²ⁿ + 1) in Python's decimal, exact for the doubles (Decimal(float) is the double's own value)."""
    with localcontext() as context:
        context.prec = 50
        inputs = {name: Decimal(value) for name, value in neuron.LECTURE.items()}
        e = (2 * (inputs["x1"] * inputs["w1"] + inputs["x2"] * inputs["w2"] + inputs["b"])).exp()
        return (e - 1) / (e + 1)


def _rounded(exact, shown):
    """The exact value rounded to as many decimals as the string `shown` has."""
    return f"{exact:.{len(shown.split('.')[1])}f}"


def test_demo_loss_states_o_correctly_rounded():
    stated = re.search(r"o = tanh\(n\) = (\S+) ", neuron.demo_loss.__doc__).group(1)
    assert stated == _rounded(_exact_o(), stated) == "0.7071067811865476"


def test_command_prints_the_second_derivative_correctly_rounded():
    out = subprocess.run([sys.executable, "-m", "models.neuron"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    engine, by_hand = re.search(r"d²o/dn² = (\S+) from the engine, −2o\(1 − o²\) = (\S+) by hand", out).groups()
    o = _exact_o()
    with localcontext() as context:
        context.prec = 50
        exact = -2 * o * (1 - o * o)  # −0.70710678118654745764…
    assert engine == by_hand == _rounded(exact, engine)


@pytest.mark.parametrize("x", [-2.0, -0.3, 0.0, math.asinh(1.0), 1.7])
def test_the_second_derivative_of_tanh_from_the_engine(x):
    first, second = neuron.tanh_derivatives(x)
    t = math.tanh(x)
    assert first == pytest.approx(1 - t * t, abs=1e-12)
    assert second == pytest.approx(-2 * t * (1 - t * t), abs=1e-12)
