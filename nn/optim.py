"""Optimizers and learning-rate schedules, with PyTorch's names, defaults and update rules.

Parameters are given as an iterable of Parameters or, to treat some
differently (no weight decay on biases and LayerNorm, say), as a list of
groups: `[{"params": [...], "weight_decay": 0.0}, ...]`. Updates write into
`param.data` in place, so the model and the optimizer keep sharing arrays.
"""
import math
import numbers

from autograd import backend


# Buffers are updated in place, so a saved state and the live one must never share an array;
# counters (AdamW's step) are plain ints and pass through.
def _host_copy(value):
    return backend.to_host(value).copy() if backend.device_of(value) else value


def _device_copy(value, device):
    return backend.xp_for(device).array(value) if backend.device_of(value) else value


def _check_range(owner, name, value, low, high, low_open=False, high_open=True):
    """A one-line ValueError unless `value` is a real number in the interval from `low` to `high`."""
    real = isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value)
    if not (real and (low < value if low_open else low <= value) and (value < high if high_open else value <= high)):
        bounds = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ValueError(f"{owner}: {name} must be a number in {bounds}, got {value!r}")


class Optimizer:
    def __init__(self, params, defaults):
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.param_groups = []
        for group in groups:
            group = {**defaults, **group, "params": list(group["params"])}
            for p in group["params"]:
                if not p.requires_grad:
                    raise ValueError(f"{type(self).__name__}: a parameter of shape {p.shape} does not require grad")
            self._check_group(group)
            self.param_groups.append(group)
        self.state = {}  # id(param) → that parameter's buffers
        self.steps = 0

    def _params(self):
        return [p for group in self.param_groups for p in group["params"]]

    def zero_grad(self):
        for p in self._params():
            p.grad = None

    def step(self):
        self.steps += 1
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, p.grad, self.state.setdefault(id(p), {}), group)

    def _check_group(self, group):
        """Refuse hyper-parameters that make no sense, naming the one at fault."""
        name = type(self).__name__
        _check_range(name, "lr", group["lr"], 0, math.inf)
        _check_range(name, "weight_decay", group["weight_decay"], 0, math.inf)

    def _update(self, p, grad, state, group):
        raise NotImplementedError

    def state_dict(self):
        """Hyper-parameters and buffers as plain values and host arrays (parameters by position)."""
        params = self._params()
        return {
            "steps": self.steps,
            "param_groups": [{k: v for k, v in g.items() if k != "params"} for g in self.param_groups],
            "state": {i: {k: _host_copy(v) for k, v in self.state[id(p)].items()}
                      for i, p in enumerate(params) if id(p) in self.state},
        }

    def load_state_dict(self, state_dict):
        params = self._params()
        if len(state_dict["param_groups"]) != len(self.param_groups):
            raise ValueError(f"{type(self).__name__}.load_state_dict: {len(state_dict['param_groups'])} groups "
                             f"in the checkpoint, {len(self.param_groups)} here")
        for i, buffers in state_dict["state"].items():
            if not 0 <= int(i) < len(params):
                raise ValueError(f"{type(self).__name__}.load_state_dict: state for parameter {i}, "
                                 f"but there are {len(params)} parameters")
            for key, value in buffers.items():
                if backend.device_of(value) and value.shape != params[int(i)].shape:
                    raise ValueError(f"{type(self).__name__}.load_state_dict: {key} of parameter {i} has shape "
                                     f"{value.shape}, the parameter {params[int(i)].shape}")
        for group, saved in zip(self.param_groups, state_dict["param_groups"]):
            self._check_group({**group, **saved})  # a checkpoint's hyper-parameters pass the constructor's checks
        for group, saved in zip(self.param_groups, state_dict["param_groups"]):
            group.update(saved)
        self.steps = state_dict["steps"]
        self.state = {id(params[int(i)]): {k: _device_copy(v, params[int(i)].device) for k, v in s.items()}
                      for i, s in state_dict["state"].items()}


class SGD(Optimizer):
    """p ← p − lr·b, b = momentum·b + (g + weight_decay·p) (b = g on the first step; plain SGD without momentum)."""

    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0):
        super().__init__(params, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay})

    def _check_group(self, group):
        super()._check_group(group)
        _check_range("SGD", "momentum", group["momentum"], 0, 1)  # at 1 the velocity never forgets and diverges

    def _update(self, p, grad, state, group):
        if group["weight_decay"]:
            grad = grad + group["weight_decay"] * p.data
        if group["momentum"]:
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = grad.copy()
            else:
                state["momentum_buffer"] *= group["momentum"]
                state["momentum_buffer"] += grad
            grad = state["momentum_buffer"]
        p.data -= group["lr"] * grad


class AdamW(Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW computes it:

    p ← p (1 − lr·λ);  m ← β₁m + (1−β₁)g;  v ← β₂v + (1−β₂)g²;
    p ← p − (lr / (1−β₁ᵗ)) · m / (√v / √(1−β₂ᵗ) + ε)

    In place, piece by cache-sized piece (backend.pieces), with one scratch
    array per piece; √(1−β₂ᵗ) moves from the denominator into ε and the step
    size, which is the same update with one pass fewer. On a GPU one fused
    kernel per parameter does it all (autograd/cuda_kernels.py).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    def _check_group(self, group):
        super()._check_group(group)
        if not isinstance(group["betas"], (tuple, list)) or len(group["betas"]) != 2:
            raise ValueError(f"AdamW: betas must be a pair (beta1, beta2), got {group['betas']!r}")
        for i, beta in enumerate(group["betas"]):
            _check_range("AdamW", f"betas[{i}]", beta, 0, 1)  # at 1 the bias correction divides by 1 − 1 = 0
        _check_range("AdamW", "eps", group["eps"], 0, math.inf)

    def _update(self, p, grad, state, group):
        xp = backend.xp_for(p.device)
        beta1, beta2 = group["betas"]
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros(p.shape, dtype=p.dtype)
            state["exp_avg_sq"] = xp.zeros(p.shape, dtype=p.dtype)
        state["step"] += 1
        t, lr = state["step"], group["lr"]
        decay = 1 - lr * group["weight_decay"]
        root_bc2 = math.sqrt(1 - beta2 ** t)
        eps = group["eps"] * root_bc2
        step_size = -(lr / (1 - beta1 ** t)) * root_bc2
        kernel = backend.fused("adamw", p.data)
        if kernel is not None:
            kernel(grad, decay, beta1, beta2, eps, step_size, p.data, state["exp_avg"], state["exp_avg_sq"])
            return
        for w, g, m, v in backend.pieces(p.data, grad, state["exp_avg"], state["exp_avg_sq"]):
            scratch = xp.subtract(g, m)
            if decay != 1:
                w *= decay
            scratch *= 1 - beta1
            m += scratch  # m + (1−β₁)(g − m), torch's lerp
            xp.multiply(g, g, out=scratch)
            scratch *= 1 - beta2
            v *= beta2
            v += scratch
            xp.sqrt(v, out=scratch)
            scratch += eps
            xp.divide(m, scratch, out=scratch)
            scratch *= step_size
            w += scratch


def clip_grad_norm_(params, max_norm):
    """Scale all gradients together so their global L2 norm is at most `max_norm`; returns the norm before."""
    _check_range("clip_grad_norm_", "max_norm", max_norm, 0, math.inf, low_open=True, high_open=False)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    xp = backend.xp_for(backend.device_of(grads[0]))
    # A dot product per cache-sized piece (one pass, no temporary), summed in float64 for accuracy;
    # one read back from a GPU, not one per tensor.
    squares = xp.stack([xp.vdot(piece, piece) for g in grads for (piece,) in backend.pieces(g)])
    total = math.sqrt(float(squares.sum(dtype=xp.float64)))
    scale = max_norm / (total + 1e-6)
    if scale < 1:
        for g in grads:
            g *= scale
    return total


def warmup_cosine(step, max_lr, warmup_steps, decay_steps, min_lr=0.0):
    """Linear warmup to `max_lr`, then cosine decay to `min_lr` at `decay_steps`, flat after."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= decay_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (max_lr - min_lr)


class WarmupCosineLR:
    """Sets every group's lr from `warmup_cosine` each time `step()` is called (once per iteration).

    Constructing it sets the lr of step `last_step + 1`: step 0 for a fresh run,
    or the step a resumed run continues from (as PyTorch's `last_epoch`).
    """

    def __init__(self, optimizer, warmup_steps, decay_steps, min_lr=0.0, max_lr=None, last_step=-1):
        self.optimizer = optimizer
        self.max_lr = max_lr if max_lr is not None else optimizer.param_groups[0]["lr"]
        self.warmup_steps, self.decay_steps, self.min_lr = warmup_steps, decay_steps, min_lr
        self.last_step = last_step
        self.step()

    def get_lr(self, step):
        return warmup_cosine(step, self.max_lr, self.warmup_steps, self.decay_steps, self.min_lr)

    def step(self):
        self.last_step += 1
        lr = self.get_lr(self.last_step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def state_dict(self):
        return {"last_step": self.last_step}

    def load_state_dict(self, state):
        self.last_step = state["last_step"] - 1
        self.step()
