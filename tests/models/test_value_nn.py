"""models.value_nn: Neuron, Layer and MLP on Value; the MLP's gradients against float64 finite differences."""
import pytest

from autograd import Value
from models.lessons.value_nn import DEMO_SIZES, MLP, Layer, Neuron, max_margin_loss, train_step

POINTS = [[0.3, 0.9], [-0.8, 0.4], [1.2, -0.5], [0.1, -0.2], [1.9, 0.3], [-0.2, 0.7]]
LABELS = [-1.0, -1.0, 1.0, 1.0, 1.0, -1.0]


def test_a_neuron_is_relu_of_w_dot_x_plus_b():
    n = Neuron(2)
    n.w[0].data, n.w[1].data, n.b.data = 2.0, -3.0, 0.5
    assert n([1.0, 0.25]).data == 2.0 - 0.75 + 0.5
    assert n([-1.0, 0.0]).data == 0.0  # −2 + 0.5 < 0: relu gives 0
    n.relu = False
    assert n([-1.0, 0.0]).data == -1.5
    assert [p.label for p in n.parameters()] == ["n.w0", "n.w1", "n.b"]


def test_the_demo_mlp_has_micrograds_shape():
    model = MLP(DEMO_SIZES)
    assert len(model.parameters()) == (2 * 16 + 16) + (16 * 16 + 16) + (16 + 1) == 337
    assert [layer.neurons[0].relu for layer in model.layers] == [True, True, False]  # the score is linear
    assert all(-1 <= p.data <= 1 for p in model.parameters())
    assert model.layers[1].neurons[3].w[5].label == "L2.n3.w5" and model.layers[2].neurons[0].b.label == "L3.n0.b"
    assert isinstance(model([0.5, -0.5]), Value)
    assert len(MLP([2, 3])([0.5, -0.5])) == 3 and len(Layer(2, 4)([1.0, 1.0])) == 4
    assert [p.data for p in MLP(DEMO_SIZES).parameters()] == [p.data for p in model.parameters()]  # seeded


def test_bad_sizes_and_inputs_say_what_is_wrong():
    with pytest.raises(ValueError, match=r"MLP: sizes must be at least two positive integers"):
        MLP([2])
    with pytest.raises(ValueError, match=r"MLP: expected 2 inputs, got 3"):
        MLP([2, 1])([1.0, 2.0, 3.0])


def test_loss_gradients_match_finite_differences():
    """Each ∂loss/∂p from the Value graph against (loss(p + h) − loss(p − h)) / 2h, in float64."""
    model = MLP([2, 4, 3, 1], seed=3)
    loss, _ = max_margin_loss(model, POINTS, LABELS, alpha=1e-2)
    model.zero_grad()
    loss.backward()
    h = 1e-6
    checked = 0
    for p in model.parameters():
        kept = p.data
        p.data = kept + h
        up = max_margin_loss(model, POINTS, LABELS, alpha=1e-2)[0].data
        p.data = kept - h
        down = max_margin_loss(model, POINTS, LABELS, alpha=1e-2)[0].data
        p.data = kept
        numeric = (up - down) / (2 * h)
        assert p.grad == pytest.approx(numeric, rel=1e-6, abs=1e-8), p.label
        checked += abs(numeric) > 1e-3
    assert checked >= 15  # most of the 31 parameters matter at this point: the check is not of zeros


def test_max_margin_loss_is_micrograds():
    # a linear "MLP" 2-1 with w = (1, 0), b = 0: the score is x₁
    model = MLP([2, 1])
    w0, w1, b = model.parameters()
    w0.data, w1.data, b.data = 1.0, 0.0, 0.0
    loss, accuracy = max_margin_loss(model, [[2.0, 0.0], [0.5, 0.0], [-0.5, 0.0]], [1.0, 1.0, 1.0], alpha=0.1)
    # margins relu(1 − x₁) = 0, 0.5, 1.5 → mean 2/3; L2 0.1 · (1² + 0² + 0²); two of three have score > 0
    assert loss.data == pytest.approx(2 / 3 + 0.1) and accuracy == pytest.approx(2 / 3)


def test_train_step_takes_one_sgd_step_with_the_demos_learning_rate():
    model = MLP([2, 4, 1], seed=5)
    before = [p.data for p in model.parameters()]
    loss, accuracy = train_step(model, POINTS, LABELS, step=30, steps=100)
    assert loss == max_margin_loss(MLP([2, 4, 1], seed=5), POINTS, LABELS)[0].data and 0 <= accuracy <= 1
    lr = 1.0 - 0.9 * 30 / 100
    for p, old in zip(model.parameters(), before):
        assert p.data == old - lr * p.grad
