"""nn.optim against values worked out by hand: SGD, AdamW, gradient clipping, warmup + cosine, state dicts."""
import math

import numpy as np
import pytest

import nn
from autograd import Tensor
from nn import Parameter
from nn.optim import SGD, AdamW, WarmupCosineLR, clip_grad_norm_, warmup_cosine


# what PyTorch's parameter is to these checks: a type of the same name from another package
TorchParameter = type("Parameter", (), {"__module__": "torch.nn.parameter", "grad": None})


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
    with pytest.raises(ValueError, match=r"^AdamW: parameter 1 of group 0 \(shape \(2,\)\) does not require grad: "
                                         r"it is frozen \(as nn.lora leaves a model's base\); give the optimizer those "
                                         r"that train, \[p for p in model.parameters\(\) if p.requires_grad\]$"):
        AdamW([Parameter(np.ones(3)), frozen])


@pytest.mark.parametrize("make, message", [
    (lambda p: AdamW(p, lr=-1), "AdamW: lr must be a number in [0, inf), got -1"),
    (lambda p: AdamW(p, lr=float("nan")), "AdamW: lr must be a number in [0, inf), got nan"),
    (lambda p: AdamW(p, lr="1e-3"), "AdamW: lr must be a number in [0, inf), got '1e-3'"),
    (lambda p: AdamW(p, betas=(1.0, 0.999)), "AdamW: betas[0] must be a number in [0, 1), got 1.0"),
    (lambda p: AdamW(p, betas=(0.9, -0.5)), "AdamW: betas[1] must be a number in [0, 1), got -0.5"),
    (lambda p: AdamW(p, betas=0.9), "AdamW: betas must be a pair (beta1, beta2), got 0.9"),
    (lambda p: AdamW(p, eps=-1e-8), "AdamW: eps must be a number in (0, inf), got -1e-08"),
    (lambda p: AdamW(p, eps=0.0), "AdamW: eps must be a number in (0, inf), got 0.0"),
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
    AdamW([p], lr=0.0, betas=(0.0, 0.0), eps=1e-300, weight_decay=0.0)
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


def test_adamw_state_is_keyed_by_the_parameter_as_pytorchs():
    p, idle = param(P0), param([1.0])
    opt = AdamW([p, idle], betas=(0.8, 0.99))
    for g in (G1, G2):
        p.grad = g.copy()
        opt.step()
    state = opt.state[p]  # torch users read optimizer.state[param]["exp_avg"]
    assert state["step"] == 2 and idle not in opt.state  # a parameter without a gradient has no state yet
    np.testing.assert_allclose(state["exp_avg"], 0.8 * 0.2 * G1 + 0.2 * G2, rtol=1e-14)
    np.testing.assert_allclose(state["exp_avg_sq"], 0.99 * 0.01 * G1 ** 2 + 0.01 * G2 ** 2, rtol=1e-14)


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


def test_warmup_cosine_lr_keeps_each_groups_ratio_to_the_first_as_pytorchs_schedulers_do():
    """It once set every group to the first group's schedule, so a group given a tenth of the lr lost it."""
    torch = pytest.importorskip("torch")
    a, b = param([1.0]), param([2.0])
    opt = AdamW([{"params": [a], "lr": 1e-3}, {"params": [b], "lr": 1e-4}])
    sched = WarmupCosineLR(opt, warmup_steps=2, decay_steps=10, min_lr=1e-5)
    t = [torch.nn.Parameter(torch.ones(1)) for _ in range(2)]
    t_opt = torch.optim.AdamW([{"params": [t[0]], "lr": 1e-3}, {"params": [t[1]], "lr": 1e-4}])
    t_sched = torch.optim.lr_scheduler.LambdaLR(t_opt, lambda step: warmup_cosine(step, 1.0, 2, 10, 1e-2))
    for _ in range(12):
        assert [g["lr"] for g in opt.param_groups] == pytest.approx([g["lr"] for g in t_opt.param_groups],
                                                                     rel=1e-12)
        sched.step()
        t_opt.step()
        t_sched.step()
    assert opt.param_groups[1]["lr"] == pytest.approx(1e-6)  # min_lr is the first group's: 1e-5 / 10


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
    sched = WarmupCosineLR(opt, warmup_steps=10, decay_steps=110, min_lr=0.1, max_lr=1.0, last_step=59)  # at 60
    assert sched.last_step == 60 and opt.param_groups[0]["lr"] == pytest.approx(0.55)
    assert sched.step() == warmup_cosine(61, 1.0, 10, 110, 0.1)


def test_a_resumed_schedule_asks_for_its_peak():
    opt = SGD([param([1.0])], lr=0.3)  # as a loaded state dict leaves it: the lr of some step, not the peak
    with pytest.raises(ValueError, match="resuming at last_step=59 needs max_lr: the optimizer's lr is then the "
                                         "schedule's at some step, not its peak; pass the run's max_lr"):
        WarmupCosineLR(opt, warmup_steps=10, decay_steps=110, last_step=59)


def test_the_schedule_refuses_groups_it_has_no_ratio_for():
    opt = SGD([param([1.0])], lr=1.0)
    sched = WarmupCosineLR(opt, warmup_steps=10, decay_steps=110)
    opt.add_param_group({"params": [param([2.0])], "lr": 0.5})
    with pytest.raises(ValueError, match="the optimizer has 2 parameter groups, the schedule was built for 1; build "
                                         "the schedule after adding every group"):
        sched.step()
    assert opt.param_groups[1]["lr"] == 0.5
    zero_first = SGD([{"params": [param([1.0])], "lr": 0.0}, {"params": [param([2.0])], "lr": 1e-3}], lr=0.1)
    with pytest.raises(ValueError, match="the first group's lr is 0, so the other groups' lrs have no ratio to it"):
        WarmupCosineLR(zero_first, warmup_steps=10, decay_steps=110, max_lr=1e-2)


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


# ---- every input checked when it is given ------------------------------------------------------------------


def snapshot(opt, params):
    """Everything an optimizer and its parameters hold, as plain copies (to show a refused call changed nothing)."""
    state = opt.state_dict()
    return (state["steps"], state["param_groups"], {i: {k: np.copy(v) for k, v in s.items()}
                                                    for i, s in state["state"].items()},
            [p.numpy().copy() for p in params], [len(g["params"]) for g in opt.param_groups])


def assert_unchanged(before, after):
    steps, groups, state, data, sizes = before
    assert (steps, groups, sizes) == (after[0], after[1], after[4])
    assert state.keys() == after[2].keys()
    for i in state:
        assert state[i].keys() == after[2][i].keys()
        for k in state[i]:
            np.testing.assert_array_equal(after[2][i][k], state[i][k])
    for a, b in zip(data, after[3]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("make, error, message", [
    (lambda a, b: SGD([a, a], lr=0.1), ValueError,
     "SGD: parameter 1 of group 0 (shape (2,)) is also parameter 0 of group 0; give each parameter once, in one group"),
    (lambda a, b: AdamW([a, b, a]), ValueError,
     "AdamW: parameter 2 of group 0 (shape (2,)) is also parameter 0 of group 0; give each parameter once, "
     "in one group"),
    (lambda a, b: SGD([{"params": [a]}, {"params": [b, a], "lr": 0.5}], lr=0.1), ValueError,
     "SGD: parameter 1 of group 1 (shape (2,)) is also parameter 0 of group 0; give each parameter once, in one group"),
    (lambda a, b: SGD(a, lr=0.1), TypeError,
     "SGD: params must be a list of Parameters or of groups (dicts), got a Parameter; put it in a list, "
     "e.g. SGD([weight], ...)"),
    (lambda a, b: AdamW({"params": [a]}), TypeError,
     "AdamW: params must be a list of Parameters or of groups (dicts), got a dict; put it in a list, "
     "e.g. AdamW([weight], ...)"),
    (lambda a, b: AdamW({a, b}), TypeError,
     "AdamW: params must be a list of Parameters or of groups (dicts), got a set; put it in a list, "
     "e.g. AdamW([weight], ...)"),
    (lambda a, b: SGD(3, lr=0.1), TypeError, "SGD: params must be a list of Parameters or of groups (dicts), got int"),
    (lambda a, b: SGD([a, {"params": [b]}], lr=0.1), TypeError,
     "SGD: params mixes Parameters and groups (dicts); give one kind: a list of Parameters, or a list of groups "
     "each with its 'params'"),
    (lambda a, b: SGD([{"lr": 0.1}], lr=0.1), TypeError,
     "SGD: a parameter group is a dict with 'params' and optional settings, got a dict without 'params'"),
    (lambda a, b: SGD([{"params": [a], "weight_decy": 0.1}], lr=0.1), ValueError,
     "SGD: unknown setting 'weight_decy' in a parameter group; the settings are lr, momentum, weight_decay"),
    (lambda a, b: AdamW([{"params": {a, b}}]), TypeError,
     "AdamW: a group's params must be in a list, not a set (whose order, and so the state dict's, changes from "
     "run to run)"),
    (lambda a, b: SGD([a, np.ones(2)], lr=0.1), TypeError,
     "SGD: parameter 1 of group 0 is a numpy.ndarray, not an nn.Parameter (an autograd Tensor)"),
    (lambda a, b: AdamW([a, TorchParameter()]), TypeError,
     "AdamW: parameter 1 of group 0 is a torch.nn.parameter.Parameter, not an nn.Parameter (an autograd Tensor)"),
    (lambda a, b: SGD([a, Tensor(np.arange(3))], lr=0.1), TypeError,
     "SGD: parameter 1 of group 0 (shape (3,)) is int64: only floating-point tensors can be optimized; give the "
     "optimizer the model's float parameters"),
    (lambda a, b: SGD([a * 2], lr=0.1), ValueError,
     "SGD: parameter 0 of group 0 (shape (2,)) was computed by Mul: only leaf tensors can be optimized; "
     "optimize the tensors it was made from"),
])
def test_bad_parameter_lists_name_the_parameter_and_the_fix(make, error, message):
    a, b = param([1.0, 2.0]), param([3.0, 4.0])
    with pytest.raises(error) as info:
        make(a, b)
    assert str(info.value) == message


def test_a_generator_and_a_tensor_inside_a_group_are_taken():
    a, b = param([1.0, 2.0], grad=[1.0, 1.0]), param([3.0], grad=[1.0])
    opt = SGD((p for p in [a]), lr=0.5)
    opt.add_param_group({"params": b, "lr": 1.0})  # a single tensor in a group, as PyTorch takes it
    opt.step()
    assert a.numpy().tolist() == [0.5, 1.5] and b.numpy().tolist() == [2.0]


def test_add_param_group_takes_the_defaults_and_its_own_settings():
    a, b = param([1.0], grad=[1.0]), param([1.0], grad=[1.0])
    opt = SGD([a], lr=0.1, momentum=0.5)
    opt.add_param_group({"params": [b], "lr": 0.2})
    assert opt.param_groups[1] == {"params": [b], "lr": 0.2, "momentum": 0.5, "weight_decay": 0.0}
    opt.step()
    np.testing.assert_allclose([a.numpy()[0], b.numpy()[0]], [0.9, 0.8], rtol=1e-15)


@pytest.mark.parametrize("group, error, message", [
    (lambda a, b: {"params": [a]}, ValueError,
     "SGD: parameter 0 of group 1 (shape (2,)) is also parameter 0 of group 0; give each parameter once, in one group"),
    (lambda a, b: {"params": [b, b]}, ValueError,
     "SGD: parameter 1 of group 1 (shape (2,)) is also parameter 0 of group 1; give each parameter once, in one group"),
    (lambda a, b: {"params": [b], "lr": -1}, ValueError, "SGD: lr must be a number in [0, inf), got -1"),
    (lambda a, b: {"params": [b], "momentum": float("nan")}, ValueError,
     "SGD: momentum must be a number in [0, 1), got nan"),
    (lambda a, b: {"params": [b], "betas": (0.9, 0.99)}, ValueError,
     "SGD: unknown setting 'betas' in a parameter group; the settings are lr, momentum, weight_decay"),
    (lambda a, b: [b], TypeError, "SGD: a parameter group is a dict with 'params' and optional settings, got a list"),
])
def test_add_param_group_refuses_what_the_constructor_refuses_and_changes_nothing(group, error, message):
    a, b = param([1.0, 2.0], grad=[1.0, 1.0]), param([3.0, 4.0])
    opt = SGD([a], lr=0.1)
    before = snapshot(opt, [a, b])
    with pytest.raises(error) as info:
        opt.add_param_group(group(a, b))
    assert str(info.value) == message
    assert_unchanged(before, snapshot(opt, [a, b]))


@pytest.mark.parametrize("make", [lambda ps: SGD(ps, lr=0.1, momentum=0.9), lambda ps: AdamW(ps)],
                         ids=["sgd", "adamw"])
@pytest.mark.parametrize("data, grad, error, message", [
    (np.ones(2), None, ValueError, "parameter 1 has shape (2,) but its gradient (2, 2); a gradient must have its "
                                   "parameter's shape (it is never broadcast into the update)"),
    (np.ones((1, 2)), None, ValueError, "parameter 1 has shape (1, 2) but its gradient (2, 2); a gradient must have "
                                        "its parameter's shape (it is never broadcast into the update)"),
    (np.array(1.0), None, ValueError, "parameter 1 has shape () but its gradient (2, 2); a gradient must have its "
                                      "parameter's shape (it is never broadcast into the update)"),
    (np.ones((2, 2, 1)), None, ValueError, "parameter 1 has shape (2, 2, 1) but its gradient (2, 2); a gradient "
                                           "must have its parameter's shape (it is never broadcast into the update)"),
    (np.eye(2, dtype=np.float32), None, TypeError,
     "parameter 1 is float32 but its gradient float64; give it a float32 gradient"),
    (None, Tensor(np.ones((2, 2))), TypeError, "parameter 1 (shape (2, 2), on cpu) has a gradient that is a Tensor; "
                                               ".grad must be an array on the parameter's device"),
])
def test_a_gradient_unlike_its_parameter_is_refused_at_step_and_updates_nothing(make, data, grad, error, message):
    # .grad refuses a misfit itself: one arises from new .data (a module cast or moved without its gradients), or is
    # a Tensor (what backward(create_graph=True) leaves)
    first, square = param([1.0, 2.0], grad=[0.5, 0.5]), param(np.eye(2))
    opt = make([first, square])
    opt.step()  # state to keep unchanged
    square.grad = np.ones((2, 2)) if grad is None else grad
    if data is not None:
        square.data = data
    before = snapshot(opt, [first, square])
    with pytest.raises(error) as info:
        opt.step()
    assert str(info.value) == f"{type(opt).__name__}.step: {message}"
    assert_unchanged(before, snapshot(opt, [first, square]))  # the first parameter's good gradient was not used


@pytest.mark.parametrize("make, moment", [(lambda ps: SGD(ps, lr=0.1, momentum=0.9), "momentum_buffer"),
                                          (lambda ps: AdamW(ps), "exp_avg")], ids=["sgd", "adamw"])
@pytest.mark.parametrize("old, new", [((2, 2), (1, 4)), ((2, 2), (2,)), ((2, 2048), (2, 1024))],
                         ids=["same-size", "smaller", "fused-kernel"])
def test_a_state_of_another_shape_than_its_parameter_is_refused_at_step_and_updates_nothing(make, moment, old, new):
    # new .data of another shape with a gradient that fits it (GPT.pad_vocab after a step): AdamW read its moments
    # flat, and its fused kernel (float32 from 1K elements) read and wrote past the ends of smaller ones
    first, grown = Parameter(np.ones(2, np.float32)), Parameter(np.ones(old, np.float32))
    opt = make([first, grown])
    first.grad, grown.grad = np.ones(2, np.float32), np.ones(old, np.float32)
    opt.step()  # state of shape `old`
    grown.data = np.ones(new, np.float32)
    grown.grad = np.ones(new, np.float32)
    before = snapshot(opt, [first, grown])
    with pytest.raises(ValueError) as info:
        opt.step()
    assert str(info.value) == (
        f"{type(opt).__name__}.step: parameter 1 has shape {new} but its {moment} {old}, kept from the steps before "
        "its .data was given another shape; make the optimizer again after reshaping the model (or load a state "
        "dict saved for the new shapes)")
    assert_unchanged(before, snapshot(opt, [first, grown]))


def _bad_state_dicts():
    """(name, change to a valid AdamW state dict of two parameters, message after 'AdamW.load_state_dict: ')."""
    def put(path, value):
        def change(state):
            target = state
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
        return change

    def drop(path):
        def change(state):
            target = state
            for key in path[:-1]:
                target = target[key]
            del target[path[-1]]
        return change

    return [
        ("steps-str", put(["steps"], "x"), "steps must be an integer in [0, inf), got 'x'"),
        ("steps-negative", put(["steps"], -1), "steps must be an integer in [0, inf), got -1"),
        ("steps-float", put(["steps"], 2.0), "steps must be an integer in [0, inf), got 2.0"),
        ("steps-bool", put(["steps"], True), "steps must be an integer in [0, inf), got True"),
        ("steps-none", put(["steps"], None), "steps must be an integer in [0, inf), got None"),
        ("no-state", drop(["state"]), "expected a dict with keys steps, param_groups, state (what state_dict() "
                                      "gives), got ['param_groups', 'steps']"),
        ("extra-key", put(["epoch"], 3), "expected a dict with keys steps, param_groups, state (what state_dict() "
                                         "gives), got ['epoch', 'param_groups', 'state', 'steps']"),
        ("groups-dict", put(["param_groups"], {"lr": 0.1}), "param_groups must be a list of dicts, got a dict"),
        ("groups-none", put(["param_groups"], [None]), "group 0 must hold the settings lr, betas, eps, "
                                                       "weight_decay, got a NoneType"),
        ("group-missing-lr", drop(["param_groups", 0, "lr"]), "group 0 must hold the settings lr, betas, eps, "
                                                             "weight_decay, got ['betas', 'eps', 'params', "
                                                             "'weight_decay']"),
        ("group-extra", put(["param_groups", 0, "momentum"], 0.9), "group 0 must hold the settings lr, betas, eps, "
                                                                   "weight_decay, got ['betas', 'eps', 'lr', "
                                                                   "'momentum', 'params', 'weight_decay']"),
        # torch refuses a group of another size too: its settings would go to other parameters
        ("group-size", put(["param_groups", 0, "params"], [0]), "group 0 holds 1 parameters in the state dict but "
                                                               "2 here; build the optimizer's groups as the saved "
                                                               "run did"),
        ("group-order", put(["param_groups", 0, "params"], [1, 0]), "group 0 holds the parameters numbered [1, 0] in "
                                                                   "the state dict but 0 to 1 here; build the "
                                                                   "optimizer's groups as the saved run did"),
        ("group-bool", put(["param_groups", 0, "params"], [False, 1]), "group 0 holds the parameters numbered "
                                                                      "[False, 1] in the state dict but 0 to 1 "
                                                                      "here; build the optimizer's groups as the "
                                                                      "saved run did"),
        ("group-lr-nan", put(["param_groups", 0, "lr"], float("nan")), None),
        ("group-eps-negative", put(["param_groups", 0, "eps"], -1.0), None),
        ("state-list", put(["state"], [{}]), "state must be a dict of parameter index → buffers, got list"),
        ("index-str", lambda s: s["state"].update({"0": s["state"].pop(0)}),
         "state for parameter '0', but there are 2 parameters"),
        ("index-negative", lambda s: s["state"].update({-1: s["state"].pop(0)}),
         "state for parameter -1, but there are 2 parameters"),
        ("index-too-big", lambda s: s["state"].update({2: s["state"].pop(0)}),
         "state for parameter 2, but there are 2 parameters"),
        ("buffers-list", put(["state", 0], [1, 2]),
         "the state of parameter 0 must be empty or hold exp_avg, exp_avg_sq, step, got a list"),
        ("missing-buffer", drop(["state", 1, "exp_avg_sq"]),
         "the state of parameter 1 must be empty or hold exp_avg, exp_avg_sq, step, got ['exp_avg', 'step']"),
        ("extra-buffer", put(["state", 1, "momentum_buffer"], np.zeros((2, 2))),
         "the state of parameter 1 must be empty or hold exp_avg, exp_avg_sq, step, got ['exp_avg', 'exp_avg_sq', "
         "'momentum_buffer', 'step']"),
        ("buffer-as-list", put(["state", 0, "exp_avg"], [0.1, 0.2]), "exp_avg of parameter 0 must be an array, "
                                                                     "got a list"),
        ("buffer-int64", put(["state", 1, "exp_avg_sq"], np.zeros((2, 2), dtype=np.int64)),
         "exp_avg_sq of parameter 1 is int64; it must be floating point, like the parameter (float64)"),
        ("buffer-bool", put(["state", 1, "exp_avg"], np.zeros((2, 2), dtype=bool)),
         "exp_avg of parameter 1 is bool; it must be floating point, like the parameter (float64)"),
        ("buffer-shape", put(["state", 1, "exp_avg"], np.zeros(4)),
         "exp_avg of parameter 1 has shape (4,), the parameter (2, 2)"),
        ("buffer-transposed", put(["state", 0, "exp_avg"], np.zeros((2, 1))),
         "exp_avg of parameter 0 has shape (2, 1), the parameter (2,)"),
        # each was taken, and the next step made every weight NaN (or froze the parameter, from an infinite one)
        ("buffer-nan", put(["state", 1, "exp_avg"], np.array([[0.0, np.nan], [0.0, 0.0]])),
         "exp_avg of parameter 1 holds NaN or infinite values; the run that saved it had diverged, or the state was "
         "changed since: load one saved before that"),
        ("buffer-inf", put(["state", 0, "exp_avg_sq"], np.array([np.inf, 1.0])),
         "exp_avg_sq of parameter 0 holds NaN or infinite values; the run that saved it had diverged, or the state "
         "was changed since: load one saved before that"),
        ("square-negative", put(["state", 0, "exp_avg_sq"], np.array([0.5, -1e-3])),
         "exp_avg_sq of parameter 0 holds negative values, where it averages squares; the state was changed since "
         "it was saved: load an unchanged one"),
        ("step-negative", put(["state", 0, "step"], -3), "step of parameter 0 must be an integer in [0, inf), got -3"),
        ("step-str", put(["state", 0, "step"], "1"), "step of parameter 0 must be an integer in [0, inf), got '1'"),
        ("step-float", put(["state", 0, "step"], 1.0), "step of parameter 0 must be an integer in [0, inf), got 1.0"),
        ("step-array", put(["state", 0, "step"], np.array(1)),
         "step of parameter 0 must be an integer in [0, inf), got array(1)"),
    ]


def test_a_saved_moment_beyond_the_parameters_dtype_is_refused_as_infinite():
    """A float64 moment of 1e39 is finite, but the float32 parameter's state it is cast to holds inf, which froze
    the parameter for good: it is judged as the dtype it will have."""
    p = Parameter(np.array([1.0, 2.0], dtype=np.float32))
    p.grad = np.array([0.1, -0.2], dtype=np.float32)
    saved = AdamW([p], lr=0.01)
    saved.step()
    state = saved.state_dict()
    state["state"][0]["exp_avg_sq"] = np.array([1e39, 1.0])
    with pytest.raises(ValueError, match=r"^AdamW.load_state_dict: exp_avg_sq of parameter 0 holds NaN or infinite "
                                         r"values; the run that saved it had diverged"):
        AdamW([p], lr=0.01).load_state_dict(state)


@pytest.mark.parametrize("change, message", [case[1:] for case in _bad_state_dicts()],
                         ids=[case[0] for case in _bad_state_dicts()])
def test_adamw_load_state_dict_checks_everything_before_changing_anything(change, message):
    saved_params = [param([1.0, 2.0], grad=[0.1, -0.2]), param(np.eye(2), grad=np.ones((2, 2)))]
    saved = AdamW(saved_params, lr=0.01)
    saved.step()
    saved.step()
    state = saved.state_dict()
    change(state)
    params = [param([5.0, 6.0], grad=[1.0, 1.0]), param(np.ones((2, 2)), grad=np.ones((2, 2)))]
    opt = AdamW(params, lr=0.5)
    opt.step()  # a state of its own, which a refused load must leave as it is
    before = snapshot(opt, params)
    with pytest.raises(ValueError) as info:
        opt.load_state_dict(state)
    text = str(info.value)
    assert "\n" not in text and text.startswith("AdamW")
    if message is not None:
        assert text == f"AdamW.load_state_dict: {message}"
    assert_unchanged(before, snapshot(opt, params))
    opt.step()  # and it still works
    assert opt.steps == 2


@pytest.mark.parametrize("change, message", [
    (lambda s: s["state"][0].update(momentum_buffer=[0.0, 0.0]), "momentum_buffer of parameter 0 must be an array, "
                                                                 "got a list"),
    (lambda s: s["state"][0].update(momentum_buffer=np.zeros(2, dtype=np.int64)),
     "momentum_buffer of parameter 0 is int64; it must be floating point, like the parameter (float64)"),
    (lambda s: s["state"][0].update(momentum_buffer=np.array([np.nan, 0.0])),
     "momentum_buffer of parameter 0 holds NaN or infinite values; the run that saved it had diverged, or the state "
     "was changed since: load one saved before that"),
    (lambda s: s["state"][0].update(step=1), "the state of parameter 0 must be empty or hold momentum_buffer, "
                                             "got ['momentum_buffer', 'step']"),
    (lambda s: s["param_groups"][0].update(momentum=1.0), "momentum must be a number in [0, 1), got 1.0"),
    (lambda s: s.update(steps=-2), "steps must be an integer in [0, inf), got -2"),
])
def test_sgd_load_state_dict_checks_everything_before_changing_anything(change, message):
    saved = SGD([param([1.0, 2.0], grad=[1.0, 1.0])], lr=0.1, momentum=0.9)
    saved.step()
    state = saved.state_dict()
    change(state)
    p = param([3.0, 4.0], grad=[1.0, 2.0])
    opt = SGD([p], lr=0.2, momentum=0.5)
    opt.step()
    before = snapshot(opt, [p])
    with pytest.raises(ValueError) as info:
        opt.load_state_dict(state)
    assert str(info.value).endswith(message) and str(info.value).startswith("SGD")
    assert_unchanged(before, snapshot(opt, [p]))


def test_sgd_without_momentum_loads_its_empty_state():
    saved = SGD([param([1.0], grad=[1.0])], lr=0.1)
    saved.step()
    assert saved.state_dict()["state"] == {0: {}}
    opt = SGD([param([1.0])], lr=0.3)
    opt.load_state_dict(saved.state_dict())
    assert opt.steps == 1 and opt.param_groups[0]["lr"] == 0.1


def test_float_buffers_of_another_precision_are_cast_to_the_parameters_as_pytorch_does():
    saved = AdamW([param([1.0, 2.0], grad=[0.5, -0.5])])  # float64
    saved.step()
    p = Parameter(np.array([1.0, 2.0], dtype=np.float32))
    opt = AdamW([p])
    opt.load_state_dict(saved.state_dict())
    buffers = opt.state[p]
    assert buffers["exp_avg"].dtype == np.float32 and buffers["exp_avg_sq"].dtype == np.float32
    np.testing.assert_allclose(buffers["exp_avg"], [0.05, -0.05], rtol=1e-6)
    assert buffers["step"] == 1


@pytest.mark.parametrize("kwargs, message", [
    (dict(min_lr=-1), "WarmupCosineLR: min_lr must be a number in [0, inf), got -1"),
    (dict(min_lr=float("nan")), "WarmupCosineLR: min_lr must be a number in [0, inf), got nan"),
    (dict(min_lr=float("inf")), "WarmupCosineLR: min_lr must be a number in [0, inf), got inf"),
    (dict(min_lr="0.1"), "WarmupCosineLR: min_lr must be a number in [0, inf), got '0.1'"),
    (dict(min_lr=0.5), "WarmupCosineLR: min_lr 0.5 exceeds max_lr 0.1; the cosine decays from max_lr down to min_lr"),
    (dict(max_lr=-0.1), "WarmupCosineLR: max_lr must be a number in [0, inf), got -0.1"),
    (dict(max_lr=float("inf")), "WarmupCosineLR: max_lr must be a number in [0, inf), got inf"),
    (dict(max_lr=True), "WarmupCosineLR: max_lr must be a number in [0, inf), got True"),
    (dict(max_lr=[0.1]), "WarmupCosineLR: max_lr must be a number in [0, inf), got [0.1]"),
    (dict(warmup_steps=float("nan")), "WarmupCosineLR: warmup_steps must be an integer in [0, inf), got nan"),
    (dict(warmup_steps=-1), "WarmupCosineLR: warmup_steps must be an integer in [0, inf), got -1"),
    (dict(warmup_steps=10.0), "WarmupCosineLR: warmup_steps must be an integer in [0, inf), got 10.0"),
    (dict(warmup_steps=True), "WarmupCosineLR: warmup_steps must be an integer in [0, inf), got True"),
    (dict(warmup_steps=None), "WarmupCosineLR: warmup_steps must be an integer in [0, inf), got None"),
    (dict(decay_steps=-5), "WarmupCosineLR: decay_steps must be an integer in [0, inf), got -5"),
    (dict(decay_steps=float("inf")), "WarmupCosineLR: decay_steps must be an integer in [0, inf), got inf"),
    (dict(decay_steps="100"), "WarmupCosineLR: decay_steps must be an integer in [0, inf), got '100'"),
    (dict(last_step=-2), "WarmupCosineLR: last_step must be an integer in [-1, inf), got -2"),
    (dict(last_step=1.5), "WarmupCosineLR: last_step must be an integer in [-1, inf), got 1.5"),
    (dict(last_step=float("nan")), "WarmupCosineLR: last_step must be an integer in [-1, inf), got nan"),
])
def test_warmup_cosine_lr_refuses_every_bad_argument_at_construction(kwargs, message):
    opt = SGD([param([1.0])], lr=0.1)
    with pytest.raises(ValueError) as info:
        WarmupCosineLR(opt, **{"warmup_steps": 10, "decay_steps": 100, **kwargs})
    assert str(info.value) == message
    assert opt.param_groups[0]["lr"] == 0.1  # untouched: no step was set


def test_warmup_cosine_lr_needs_an_optimizer():
    with pytest.raises(TypeError, match="WarmupCosineLR: optimizer must be an nn.optim optimizer, got list"):
        WarmupCosineLR([param([1.0])], warmup_steps=1, decay_steps=10)
    torch_adamw = type("AdamW", (), {"__module__": "torch.optim.adamw"})()  # "got AdamW" read as this one's
    with pytest.raises(TypeError, match=r"^WarmupCosineLR: optimizer must be an nn.optim optimizer, got "
                                        r"torch\.optim\.adamw\.AdamW$"):
        WarmupCosineLR(torch_adamw, warmup_steps=1, decay_steps=10)


@pytest.mark.parametrize("kwargs, first_lr", [
    (dict(warmup_steps=0, decay_steps=10), 0.1), (dict(warmup_steps=5, decay_steps=0), 0.02),
    (dict(warmup_steps=0, decay_steps=0, min_lr=0.1), 0.1), (dict(warmup_steps=2, decay_steps=10, max_lr=0.0), 0.0),
    (dict(warmup_steps=np.int64(4), decay_steps=np.int32(10), min_lr=np.float32(0.0)), 0.025),
    (dict(warmup_steps=100, decay_steps=10), 0.001),  # warmup past the decay's end: what a short run gets
])
def test_warmup_cosine_lr_edge_arguments_that_make_sense(kwargs, first_lr):
    opt = SGD([param([1.0])], lr=0.1)
    WarmupCosineLR(opt, **kwargs)
    assert opt.param_groups[0]["lr"] == pytest.approx(first_lr, rel=1e-7)


@pytest.mark.parametrize("state, message", [
    ({"last_step": -1}, "WarmupCosineLR.load_state_dict: last_step must be an integer in [0, inf), got -1"),
    ({"last_step": "3"}, "WarmupCosineLR.load_state_dict: last_step must be an integer in [0, inf), got '3'"),
    ({"last_step": 3.0}, "WarmupCosineLR.load_state_dict: last_step must be an integer in [0, inf), got 3.0"),
    ({}, "WarmupCosineLR.load_state_dict: expected {'last_step': n} (what state_dict() gives), got []"),
    ({"last_step": 3, "lr": 0.1}, "WarmupCosineLR.load_state_dict: expected {'last_step': n} (what state_dict() "
                                  "gives), got ['last_step', 'lr']"),
    ([3], "WarmupCosineLR.load_state_dict: expected {'last_step': n} (what state_dict() gives), got a list"),
])
def test_warmup_cosine_lr_load_state_dict_checks_first(state, message):
    opt = SGD([param([1.0])], lr=1.0)
    sched = WarmupCosineLR(opt, warmup_steps=10, decay_steps=110, min_lr=0.1)
    sched.step()
    with pytest.raises(ValueError) as info:
        sched.load_state_dict(state)
    assert str(info.value) == message
    assert sched.last_step == 1 and opt.param_groups[0]["lr"] == pytest.approx(0.2)


@pytest.mark.parametrize("args, message", [
    ((-1, 1.0, 10, 100), "warmup_cosine: step must be an integer in [0, inf), got -1"),
    ((1.5, 1.0, 10, 100), "warmup_cosine: step must be an integer in [0, inf), got 1.5"),
    ((0, float("nan"), 10, 100), "warmup_cosine: max_lr must be a number in [0, inf), got nan"),
    ((0, 1.0, 10, 100, 2.0), "warmup_cosine: min_lr 2.0 exceeds max_lr 1.0; the cosine decays from max_lr down to "
                             "min_lr"),
])
def test_warmup_cosine_checks_its_arguments(args, message):
    with pytest.raises(ValueError) as info:
        warmup_cosine(*args)
    assert str(info.value) == message


def test_clip_grad_norm_takes_one_parameter_as_pytorch_does():
    p = param([0.0, 0.0], grad=[3.0, 4.0])
    assert clip_grad_norm_(p, max_norm=1.0) == pytest.approx(5.0)
    np.testing.assert_allclose(p.grad, [0.6, 0.8], rtol=1e-6)


def test_clip_grad_norm_refuses_what_is_not_a_parameter_before_clipping_any():
    """PyTorch's parameters passed as ones without gradients: a norm of 0 and nothing clipped, with no word said
    (and one with a gradient failed on its 'unknown device None')."""
    p = param([0.0, 0.0], grad=[3.0, 4.0])
    with pytest.raises(TypeError, match=r"^clip_grad_norm_: parameter 1 is a torch\.nn\.parameter\.Parameter, not an "
                                        r"nn\.Parameter \(an autograd Tensor\)$"):
        clip_grad_norm_([p, TorchParameter()], max_norm=1.0)
    np.testing.assert_array_equal(p.grad, [3.0, 4.0])


@pytest.mark.parametrize("flat, dtype, size", [(False, np.float64, 3), (True, np.float64, 3), (False, np.float32, 3),
                                               (True, np.float32, 5000), (False, np.float64, 0)],
                         ids=["float64", "float64-flat", "float32", "float32-flat-kernel", "no-gradients"])
def test_clip_grad_norm_returns_a_number_with_item_on_every_path_as_pytorchs_tensor(flat, dtype, size):
    """A PyTorch loop logs `clip_grad_norm_(...).item()`: it worked where the fused kernel answered (a NumPy float)
    and raised AttributeError everywhere else (a Python float)."""
    p = Parameter(np.zeros(max(size, 1), dtype=dtype))
    opt = AdamW([p], flat_grads=flat)
    opt.zero_grad()
    if flat:
        p.grad[...] = 0.5
    elif size:
        p.grad = np.full(size, 0.5, dtype=dtype)
    norm = clip_grad_norm_([p], max_norm=1e9)
    assert norm.item() == pytest.approx(0.5 * math.sqrt(size), rel=1e-7)
    assert isinstance(norm, np.float64)


@pytest.mark.parametrize("max_norm", [True, "1", None, float("-inf")])
def test_clip_grad_norm_refuses_a_max_norm_that_is_not_a_positive_number(max_norm):
    p = param([0.0, 0.0], grad=[3.0, 4.0])
    with pytest.raises(ValueError) as info:
        clip_grad_norm_([p], max_norm)
    assert str(info.value) == f"clip_grad_norm_: max_norm must be a number in (0, inf], got {max_norm!r}"
    np.testing.assert_array_equal(p.grad, [3.0, 4.0])


def test_clip_grad_norm_sums_float16_squares_without_overflow():
    """300² + 400² overflowed float16's 65,504: the norm read inf and the gradients were scaled to 0."""
    p = param([0.0, 0.0])
    p.data = p.data.astype(np.float16)
    p.grad = np.array([300, 400], np.float16)
    assert clip_grad_norm_([p], 1.0) == pytest.approx(500.0)
    np.testing.assert_allclose(p.grad, [0.6, 0.8], rtol=1e-3)


def test_flat_zero_grad_clears_a_group_added_later():
    a = Parameter(np.ones(4, dtype=np.float32))
    b = Parameter(np.ones(4, dtype=np.float32))
    opt = AdamW([a], flat_grads=True)
    opt.add_param_group({"params": [b]})
    for _ in range(3):
        opt.zero_grad()
        (a.sum() + b.sum()).backward()
        np.testing.assert_array_equal(b.grad, np.ones(4))
        np.testing.assert_array_equal(a.grad, np.ones(4))


def test_an_older_state_dict_without_group_positions_still_loads():
    saved = AdamW([param([1.0, 2.0], grad=[0.1, -0.2])], lr=0.01)
    saved.step()
    state = saved.state_dict()
    assert state["param_groups"][0]["params"] == [0]
    del state["param_groups"][0]["params"]
    opt = AdamW([param([1.0, 2.0], grad=[0.1, -0.2])], lr=0.5)
    opt.load_state_dict(state)
    assert opt.param_groups[0]["lr"] == 0.01 and opt.steps == 1


@pytest.mark.parametrize("flat", [False, True])
def test_a_nan_norm_makes_every_gradient_nan_as_in_pytorch(flat):
    """Clipping left every other gradient as it was, so only the NaN's own weight broke: a run that looked
    healthy elsewhere. Both paths scale the gradients in place, as PyTorch's clip_grad_norm_ does."""
    ps = [Parameter(np.ones(2048, dtype=np.float32)) for _ in range(2)]
    opt = AdamW(ps, flat_grads=flat)
    opt.zero_grad()
    (ps[0].sum() + ps[1].sum()).backward()  # into the flat buffer's views where there is one
    ps[0].grad[0] = np.nan
    assert math.isnan(clip_grad_norm_(ps, 1.0))
    assert all(np.isnan(p.grad).all() for p in ps)
    opt.step()
    assert all(np.isnan(p.data).all() for p in ps)


def test_optimizer_zero_grad_set_to_none_false_zeroes_a_gradient_with_a_graph():
    """A .grad that backward(create_graph=True) left, a Tensor: zeros without its graph (as PyTorch), not a
    TypeError from item assignment."""
    p = param([1.0, 2.0])
    opt = SGD([p], lr=0.1)
    ((p * p).sum()).backward(create_graph=True)
    assert isinstance(p.grad, Tensor)
    opt.zero_grad(set_to_none=False)
    assert isinstance(p.grad, np.ndarray)
    np.testing.assert_array_equal(p.grad, [0.0, 0.0])


@pytest.mark.parametrize("flat", [False, True])
def test_optimizer_zero_grad_set_to_none_false_keeps_zeroed_arrays(flat):
    ps = [param([1.0, 2.0, 3.0]), param([4.0, 5.0])]
    opt = AdamW(ps, flat_grads=flat)
    for p in ps:
        p.grad = np.full(p.shape, 2.0)  # not the buffer's views: a flat zero_grad hands those back
    opt.zero_grad(set_to_none=False)
    for i, p in enumerate(ps):
        np.testing.assert_array_equal(p.grad, np.zeros(p.shape))
        assert not flat or p.grad is opt.grad_buffer.views[i]
    opt.zero_grad()
    assert all((p.grad is None) != flat for p in ps)
