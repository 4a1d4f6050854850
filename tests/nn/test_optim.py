"""nn.optim against values worked out by hand: SGD, AdamW, gradient clipping, warmup + cosine, state dicts."""
import math

import numpy as np
import pytest

import nn
from nn import Parameter
from nn.optim import SGD, AdamW, WarmupCosineLR, clip_grad_norm_, warmup_cosine


def param(values, grad=None):
    p = Parameter(np.array(values, dtype=np.float64))
    p.grad = None if grad is None else np.array(grad, dtype=np.float64)
    return p


# ---- SGD ------------------------------------------------------------------------------


def test_sgd_steps_against_the_gradient():
    p = param([1.0, -2.0], grad=[0.5, 0.25])
    SGD([p], lr=0.1).step()
    np.testing.assert_allclose(p.numpy(), [0.95, -2.025], rtol=1e-15)


def test_sgd_weight_decay_adds_lambda_p_to_the_gradient():
    p = param([1.0, -2.0], grad=[0.5, 0.25])
    SGD([p], lr=0.1, weight_decay=0.1).step()  # g + 0.1 p = (0.6, 0.05)
    np.testing.assert_allclose(p.numpy(), [0.94, -2.005], rtol=1e-15)


def test_sgd_momentum_keeps_a_velocity():
    p = param([1.0, -2.0])
    opt = SGD([p], lr=0.1, momentum=0.9)
    p.grad = np.array([1.0, -1.0])
    opt.step()  # b = g = (1, −1)
    np.testing.assert_allclose(p.numpy(), [0.9, -1.9], rtol=1e-15)
    p.grad = np.array([0.5, 0.5])
    opt.step()  # b = 0.9 (1, −1) + (0.5, 0.5) = (1.4, −0.4)
    np.testing.assert_allclose(p.numpy(), [0.76, -1.86], rtol=1e-14)


def test_a_parameter_without_gradient_is_left_alone():
    moving, idle = param([1.0], grad=[1.0]), param([5.0])
    SGD([moving, idle], lr=0.5, momentum=0.9, weight_decay=0.1).step()
    assert idle.numpy()[0] == 5.0 and moving.numpy()[0] != 1.0


def test_optimizer_zero_grad():
    p = param([1.0], grad=[1.0])
    opt = SGD([p], lr=0.1)
    opt.zero_grad()
    assert p.grad is None


def test_bad_parameter_lists_are_clear_errors():
    with pytest.raises(ValueError, match="empty"):
        SGD([], lr=0.1)
    frozen = Parameter(np.ones(2), requires_grad=False)
    with pytest.raises(ValueError, match="does not require grad"):
        AdamW([frozen])


@pytest.mark.parametrize("make, message", [
    (lambda p: AdamW(p, lr=-1), "AdamW: lr must be a number in [0, inf), got -1"),
    (lambda p: AdamW(p, lr=float("nan")), "AdamW: lr must be a number in [0, inf), got nan"),
    (lambda p: AdamW(p, lr="1e-3"), "AdamW: lr must be a number in [0, inf), got '1e-3'"),
    (lambda p: AdamW(p, betas=(1.0, 0.999)), "AdamW: betas[0] must be a number in [0, 1), got 1.0"),
    (lambda p: AdamW(p, betas=(0.9, -0.5)), "AdamW: betas[1] must be a number in [0, 1), got -0.5"),
    (lambda p: AdamW(p, betas=0.9), "AdamW: betas must be a pair (beta1, beta2), got 0.9"),
    (lambda p: AdamW(p, eps=-1e-8), "AdamW: eps must be a number in [0, inf), got -1e-08"),
    (lambda p: AdamW(p, weight_decay=-0.1), "AdamW: weight_decay must be a number in [0, inf), got -0.1"),
    (lambda p: AdamW([{"params": p, "lr": float("inf")}]), "AdamW: lr must be a number in [0, inf), got inf"),
    (lambda p: SGD(p, lr=-0.1), "SGD: lr must be a number in [0, inf), got -0.1"),
    (lambda p: SGD(p, lr=0.1, momentum=1.0), "SGD: momentum must be a number in [0, 1), got 1.0"),
    (lambda p: SGD(p, lr=0.1, weight_decay=-1), "SGD: weight_decay must be a number in [0, inf), got -1"),
    (lambda p: clip_grad_norm_(p, -1.0), "clip_grad_norm_: max_norm must be a number in (0, inf], got -1.0"),
    (lambda p: clip_grad_norm_(p, 0), "clip_grad_norm_: max_norm must be a number in (0, inf], got 0"),
    (lambda p: clip_grad_norm_(p, float("nan")), "clip_grad_norm_: max_norm must be a number in (0, inf], got nan"),
])
def test_nonsense_hyper_parameters_are_refused_by_name_value_and_range(make, message):
    p = param([1.0, 2.0], grad=[3.0, 4.0])
    with pytest.raises(ValueError) as error:
        make([p])
    assert str(error.value) == message
    np.testing.assert_array_equal(p.grad, [3.0, 4.0])  # a refused clip leaves the gradient alone


def test_edge_values_that_make_sense_are_accepted():
    p = param([1.0], grad=[2.0])
    AdamW([p], lr=0.0, betas=(0.0, 0.0), eps=0.0, weight_decay=0.0)
    SGD([p], lr=0.0, momentum=0.0)
    assert clip_grad_norm_([p], math.inf) == 2.0  # inf measures the norm and clips nothing
    np.testing.assert_array_equal(p.grad, [2.0])


# ---- AdamW ----------------------------------------------------------------------------


def adamw_by_hand(p, grads, lr, beta1, beta2, eps, wd):
    """torch.optim.AdamW's update, written out: decay first, then the bias-corrected Adam step."""
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        p = p * (1 - lr * wd)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat, v_hat = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p


P0 = np.array([1.0, -2.0, 0.5])
G1 = np.array([0.1, -0.3, 2.0])
G2 = np.array([-0.2, 0.4, 1.0])


def test_adamw_defaults_are_pytorchs():
    group = AdamW([param([1.0])]).param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (1e-3, (0.9, 0.999), 1e-8, 0.01)


def test_adamw_first_step_is_lr_times_the_sign_after_decoupled_decay():
    p = param(P0, grad=G1)
    AdamW([p], lr=0.01, weight_decay=0.1).step()
    # After bias correction m̂ = g and v̂ = g², so the step is lr · g / (|g| + ε): lr · sign(g).
    expected = P0 * (1 - 0.01 * 0.1) - 0.01 * G1 / (np.abs(G1) + 1e-8)
    np.testing.assert_allclose(p.numpy(), expected, rtol=1e-14)
    np.testing.assert_allclose(p.numpy(), adamw_by_hand(P0, [G1], 0.01, 0.9, 0.999, 1e-8, 0.1), rtol=1e-14)


def test_adamw_second_step_uses_both_moments_with_bias_correction():
    p = param(P0)
    opt = AdamW([p], lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    for g in (G1, G2):
        p.grad = g.copy()
        opt.step()
    p1 = P0 * (1 - 0.001) - 0.01 * G1 / (np.abs(G1) + 1e-6)
    m = 0.8 * 0.2 * G1 + 0.2 * G2
    v = 0.99 * 0.01 * G1 ** 2 + 0.01 * G2 ** 2
    expected = p1 * (1 - 0.001) - 0.01 * (m / (1 - 0.8 ** 2)) / (np.sqrt(v / (1 - 0.99 ** 2)) + 1e-6)
    np.testing.assert_allclose(p.numpy(), expected, rtol=1e-14)


@pytest.mark.parametrize("order", ["C", "F"], ids=["contiguous", "transposed"])
def test_adamw_on_a_parameter_larger_than_one_cache_piece(order):
    # 300 × 250 = 75,000 elements: more than one of the pieces the update runs over (2¹⁶); a Fortran-ordered
    # parameter is updated whole instead
    rng = np.random.default_rng(0)
    p0, grads = rng.normal(size=(300, 250)), [rng.normal(size=(300, 250)) for _ in range(3)]
    p = Parameter(np.array(p0, order=order))
    opt = AdamW([p], lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    for g in grads:
        p.grad = np.array(g, order=order)
        opt.step()
    np.testing.assert_allclose(p.numpy(), adamw_by_hand(p0, grads, 0.01, 0.8, 0.99, 1e-6, 0.1), rtol=1e-12)


def test_adamw_weight_decay_is_decoupled_from_the_gradient():
    """With a zero gradient Adam's step is 0: only the decay moves the weights, by the factor 1 − lr·λ."""
    p = param(P0, grad=np.zeros(3))
    AdamW([p], lr=0.5, weight_decay=0.2).step()
    np.testing.assert_allclose(p.numpy(), P0 * 0.9, rtol=1e-15)


def test_param_groups_take_their_own_weight_decay():
    decayed, exempt = param(P0, grad=np.zeros(3)), param(P0, grad=np.zeros(3))
    opt = AdamW([{"params": [decayed], "weight_decay": 0.2}, {"params": [exempt], "weight_decay": 0.0}], lr=0.5)
    opt.step()
    np.testing.assert_allclose(decayed.numpy(), P0 * 0.9, rtol=1e-15)
    np.testing.assert_array_equal(exempt.numpy(), P0)
    assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[1]["betas"] == (0.9, 0.999)


# ---- clipping and schedules -------------------------------------------------------------


def test_clip_grad_norm_returns_the_norm_before_clipping_and_scales_every_gradient():
    a, b, idle = param([0.0, 0.0], grad=[3.0, 4.0]), param([[0.0]], grad=[[12.0]]), param([1.0])
    total = clip_grad_norm_([a, b, idle], max_norm=1.0)
    assert total == pytest.approx(13.0, rel=1e-15)
    scale = 1.0 / (13.0 + 1e-6)
    np.testing.assert_allclose(a.grad, [3 * scale, 4 * scale], rtol=1e-15)
    np.testing.assert_allclose(b.grad, [[12 * scale]], rtol=1e-15)
    assert math.sqrt((a.grad ** 2).sum() + (b.grad ** 2).sum()) == pytest.approx(1.0, rel=1e-6)
    assert idle.grad is None


def test_clip_grad_norm_of_float32_gradients_larger_than_one_cache_piece():
    rng = np.random.default_rng(0)
    grads = [rng.normal(size=(400, 300)).astype(np.float32) * 1e-3, rng.normal(size=7).astype(np.float32)]
    params = [Parameter(np.zeros(g.shape, dtype=np.float32)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.copy()
    exact = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads))
    assert clip_grad_norm_(params, max_norm=0.5) == pytest.approx(exact, rel=1e-6)
    np.testing.assert_allclose(params[0].grad, grads[0] * (0.5 / (exact + 1e-6)), rtol=1e-6)


def test_clip_grad_norm_leaves_small_gradients_alone():
    a = param([0.0, 0.0], grad=[3.0, 4.0])
    assert clip_grad_norm_(iter([a]), max_norm=10.0) == pytest.approx(5.0)
    np.testing.assert_array_equal(a.grad, [3.0, 4.0])
    assert clip_grad_norm_([param([1.0])], max_norm=1.0) == 0.0


@pytest.mark.parametrize("step, lr", [
    (0, 0.1),                                            # warmup starts at max_lr / warmup_steps
    (4, 0.5),
    (9, 1.0),                                            # warmup ends at max_lr
    (10, 1.0),                                           # decay starts at max_lr
    (35, 0.1 + 0.45 * (1 + math.cos(math.pi / 4))),      # a quarter of the way down
    (60, 0.55),                                          # mid-decay: halfway between max and min
    (110, 0.1),                                          # decay ends at min_lr
    (500, 0.1),                                          # and stays there
])
def test_warmup_cosine(step, lr):
    assert warmup_cosine(step, max_lr=1.0, warmup_steps=10, decay_steps=110, min_lr=0.1) == pytest.approx(lr, rel=1e-12)


def test_warmup_cosine_lr_sets_every_groups_lr():
    a, b = param([1.0]), param([2.0])
    opt = SGD([{"params": [a]}, {"params": [b], "weight_decay": 0.0}], lr=1.0)
    sched = WarmupCosineLR(opt, warmup_steps=10, decay_steps=110, min_lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [pytest.approx(0.1)] * 2  # step 0 on construction
    for _ in range(9):
        lr = sched.step()
    assert lr == pytest.approx(1.0) and [g["lr"] for g in opt.param_groups] == [pytest.approx(1.0)] * 2
    for _ in range(51):
        lr = sched.step()
    assert sched.last_step == 60 and lr == pytest.approx(0.55)
    assert opt.param_groups[1]["lr"] == pytest.approx(0.55)


def test_warmup_cosine_lr_state_round_trip():
    opt = SGD([param([1.0])], lr=1.0)
    sched = WarmupCosineLR(opt, warmup_steps=10, decay_steps=110, min_lr=0.1)
    for _ in range(30):
        sched.step()
    other_opt = SGD([param([1.0])], lr=1.0)
    other = WarmupCosineLR(other_opt, warmup_steps=10, decay_steps=110, min_lr=0.1)
    other.load_state_dict(sched.state_dict())
    assert other_opt.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    assert other.step() == sched.step()


def test_warmup_cosine_lr_resumes_from_last_step():
    opt = SGD([param([1.0])], lr=1.0)
    sched = WarmupCosineLR(opt, warmup_steps=10, decay_steps=110, min_lr=0.1, last_step=59)  # a run resumed at 60
    assert sched.last_step == 60 and opt.param_groups[0]["lr"] == pytest.approx(0.55)
    assert sched.step() == warmup_cosine(61, 1.0, 10, 110, 0.1)


# ---- optimizer state ---------------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda params: SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01),
    lambda params: AdamW(params, lr=0.01, weight_decay=0.1),
], ids=["sgd-momentum", "adamw"])
def test_optimizer_state_dict_round_trip_continues_identically(make):
    rng = np.random.default_rng(0)
    grads = [(rng.normal(size=3), rng.normal(size=(2, 2))) for _ in range(6)]
    params = [param(P0), param(np.eye(2))]
    opt = make(params)

    def run(optimizer, ps, steps):
        for g in steps:
            for p, gp in zip(ps, g):
                p.grad = gp.copy()
            optimizer.step()

    run(opt, params, grads[:3])
    saved = opt.state_dict()
    saved_params = [p.numpy().copy() for p in params]
    run(opt, params, grads[3:])  # the original keeps going: the saved state must not move with it

    resumed = [param(a) for a in saved_params]
    resumed_opt = make(resumed)
    resumed_opt.param_groups[0]["lr"] = 123.0  # the checkpoint's hyper-parameters win
    resumed_opt.load_state_dict(saved)
    assert resumed_opt.steps == 3 and resumed_opt.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    run(resumed_opt, resumed, grads[3:])
    for p, q in zip(params, resumed):
        np.testing.assert_array_equal(q.numpy(), p.numpy())


def test_loading_optimizer_state_twice_gives_independent_buffers():
    p = param(P0, grad=G1)
    opt = SGD([p], lr=0.1, momentum=0.9)
    opt.step()
    saved = opt.state_dict()
    first, second = param(P0), param(P0)
    opt_a, opt_b = SGD([first], lr=0.1, momentum=0.9), SGD([second], lr=0.1, momentum=0.9)
    opt_a.load_state_dict(saved)
    opt_b.load_state_dict(saved)
    first.grad, second.grad = G2.copy(), G2.copy()
    opt_a.step()
    opt_b.step()
    np.testing.assert_array_equal(first.numpy(), second.numpy())


def test_optimizer_state_dict_is_plain_host_data():
    p = param(P0, grad=G1)
    opt = AdamW([p])
    opt.step()
    state = opt.state_dict()
    assert state["steps"] == 1
    assert state["state"][0]["step"] == 1
    assert isinstance(state["state"][0]["exp_avg"], np.ndarray)


def test_load_state_dict_with_another_number_of_groups_is_a_clear_error():
    two_groups = SGD([{"params": [param([1.0])]}, {"params": [param([2.0])]}], lr=0.1)
    with pytest.raises(ValueError, match="2 groups in the checkpoint, 1 here"):
        SGD([param([1.0])], lr=0.1).load_state_dict(two_groups.state_dict())


def test_load_state_dict_of_other_parameters_is_a_clear_error():
    saved = AdamW([param([1.0, 2.0], grad=[1.0, 1.0])])
    saved.step()
    with pytest.raises(ValueError, match=r"exp_avg of parameter 0 has shape \(2,\), the parameter \(3,\)"):
        AdamW([param([1.0, 2.0, 3.0])]).load_state_dict(saved.state_dict())
    two = AdamW([param([1.0]), param([2.0])])
    state = two.state_dict()
    state["state"] = {5: {"step": 1}}
    with pytest.raises(ValueError, match="state for parameter 5, but there are 2 parameters"):
        two.load_state_dict(state)


def test_load_state_dict_refuses_hyper_parameters_the_constructor_refuses():
    opt = AdamW([param([1.0])], lr=1e-3)
    state = opt.state_dict()
    state["param_groups"][0]["betas"] = (0.9, 1.0)
    with pytest.raises(ValueError, match=r"AdamW: betas\[1\]"):
        opt.load_state_dict(state)
    assert opt.param_groups[0]["betas"] == (0.9, 0.999)  # left as it was


def test_nn_exposes_optim():
    assert nn.optim.SGD is SGD and nn.optim.AdamW is AdamW
