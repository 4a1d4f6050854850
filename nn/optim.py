"""Optimizers and learning-rate schedules, with PyTorch's names, defaults and update rules.

Parameters are given as an iterable of Parameters or, to treat some
differently (no weight decay on biases and LayerNorm, say), as a list of
groups: `[{"params": [...], "weight_decay": 0.0}, ...]`. Updates write into
`param.data` in place, so the model and the optimizer keep sharing arrays, and
mark each parameter changed (Tensor.mark_changed): a graph recorded before a
step then refuses backward rather than mixing old weights with new.
Every input is checked when it is given (a range as autograd.intervals writes
it), not at the step that would trip on it, and a refused call changes nothing.
"""
import math
import numbers
import weakref

import numpy as np

from autograd import Tensor, backend, kernels
from autograd.intervals import check

from .module import type_name, zero_gradient


# Buffers are updated in place, so a saved state and the live one must never share an array;
# counters (AdamW's step) are plain ints and pass through.
def _host_copy(value):
    return backend.to_host(value).copy() if backend.device_of(value) else value


def _param_copy(value, param):
    """A saved buffer for `param`: on its device and, as PyTorch casts floating state, in its dtype."""
    return backend.xp_for(param.device).array(value, dtype=param.dtype) if backend.device_of(value) else value


class Optimizer:
    """What every optimizer shares: parameter groups, checked inputs, `step()` and state dicts.

    A subclass gives its hyper-parameters' defaults, checks them in `_check_group`,
    names the per-parameter state its update keeps (`buffers`, arrays shaped like
    the parameter, of which `squares` are never negative; `counters`, integers)
    and writes the update in `_update`.
    Everything given is checked when it is given, and a refused call changes nothing.
    """

    buffers = ()
    squares = ()
    counters = ()

    def __init__(self, params, defaults):
        name = type(self).__name__
        if isinstance(params, (Tensor, dict, set)):  # list() would split a tensor into rows, a dict into its keys
            raise TypeError(f"{name}: params must be a list of Parameters or of groups (dicts), "
                            f"got a {type(params).__name__}; put it in a list, e.g. {name}([weight], ...)")
        try:
            params = list(params)
        except TypeError:
            raise TypeError(f"{name}: params must be a list of Parameters or of groups (dicts), "
                            f"got {type(params).__name__}") from None
        if not params:
            raise ValueError(f"{name}: got an empty parameter list")
        groups = sum(isinstance(p, dict) for p in params)
        if groups not in (0, len(params)):
            raise TypeError(f"{name}: params mixes Parameters and groups (dicts); give one kind: "
                            "a list of Parameters, or a list of groups each with its 'params'")
        self.defaults = defaults
        self.param_groups = []
        self.state = {}  # parameter → its buffers, as PyTorch keys them (a Tensor hashes by identity)
        self.steps = 0
        for group in params if groups else [{"params": params}]:
            self.add_param_group(group)
        # A process that trains has glibc keep freed memory for the next step (backend.keep_freed_memory says why)
        backend.keep_freed_memory()

    def add_param_group(self, group):
        """Add a group of parameters with settings of its own (the rest from the defaults), checked first."""
        name = type(self).__name__
        if not isinstance(group, dict) or "params" not in group:
            got = "a dict without 'params'" if isinstance(group, dict) else f"a {type(group).__name__}"
            raise TypeError(f"{name}: a parameter group is a dict with 'params' and optional settings, got {got}")
        unknown = sorted(set(group) - {"params", *self.defaults})
        if unknown:
            raise ValueError(f"{name}: unknown setting {', '.join(map(repr, unknown))} in a parameter group; "
                             f"the settings are {', '.join(self.defaults)}")
        params = group["params"]
        if isinstance(params, set):
            raise TypeError(f"{name}: a group's params must be in a list, not a set (whose order, "
                            "and so the state dict's, changes from run to run)")
        params = [params] if isinstance(params, Tensor) else list(params)
        index = len(self.param_groups)
        seen = {id(p): (g, i) for g, other in enumerate(self.param_groups) for i, p in enumerate(other["params"])}
        for i, p in enumerate(params):
            where = f"parameter {i} of group {index}"
            if not isinstance(p, Tensor):
                raise TypeError(f"{name}: {where} is a {type_name(p)}, not an nn.Parameter (an autograd Tensor)")
            if p.dtype.kind != "f":  # it cannot require grad, so the frozen parameter's message would mislead
                raise TypeError(f"{name}: {where} (shape {p.shape}) is {p.dtype}: only floating-point tensors can "
                                "be optimized; give the optimizer the model's float parameters")
            if not p.requires_grad:
                raise ValueError(f"{name}: {where} (shape {p.shape}) does not require grad: it is frozen (as nn.lora "
                                 "leaves a model's base); give the optimizer those that train, "
                                 "[p for p in model.parameters() if p.requires_grad]")
            if not p.is_leaf:
                raise ValueError(f"{name}: {where} (shape {p.shape}) was computed by {p.op.name}: only leaf "
                                 "tensors can be optimized; optimize the tensors it was made from")
            if id(p) in seen:
                raise ValueError(f"{name}: {where} (shape {p.shape}) is also parameter {seen[id(p)][1]} of group "
                                 f"{seen[id(p)][0]}; give each parameter once, in one group")
            seen[id(p)] = (index, i)
        group = {**self.defaults, **group, "params": params}
        self._check_group(group)
        self.param_groups.append(group)

    def _params(self):
        return [p for group in self.param_groups for p in group["params"]]

    grad_buffer = None  # a GradBuffer when the optimizer keeps every gradient in one array (AdamW's flat_grads)

    def zero_grad(self, set_to_none=True):
        """Drop every gradient, as PyTorch does by default; set_to_none=False fills them with zeros instead. With
        flat_grads the buffer is zeroed and its parameters get their views back either way."""
        for p in self._params():
            if set_to_none or p.grad is None or self.grad_buffer is not None:
                p.grad = None
            else:
                zero_gradient(p)
        if self.grad_buffer is not None:  # a group added since has no view: its gradients were dropped above
            self.grad_buffer.zero_()

    def step(self):
        """Update every parameter that has a gradient; a gradient or a state unlike its parameter updates none."""
        for i, p in enumerate(self._params()):
            grad, data = p.grad, p.data
            if grad is None:  # not updated
                continue
            if not (type(grad) is type(data) and grad.shape == data.shape and grad.dtype == data.dtype):
                self._refuse_grad(i, p)
            # p.data given another shape since the last step (GPT.pad_vocab): the update would read its moments
            # flat, or with the fused kernel write past the ends of the old, smaller ones
            state = self.state.get(p, {})
            stale = next((key for key in self.buffers if key in state and state[key].shape != data.shape), None)
            if stale is not None:
                raise ValueError(f"{type(self).__name__}.step: parameter {i} has shape {p.shape} but its {stale} "
                                 f"{state[stale].shape}, kept from the steps before its .data was given another "
                                 "shape; make the optimizer again after reshaping the model (or load a state dict "
                                 "saved for the new shapes)")
        self.steps += 1
        for group in self.param_groups:
            stepped = [p for p in group["params"] if p.grad is not None]
            self._update_group(group, stepped)
            for p in stepped:
                p.mark_changed()

    def _refuse_grad(self, i, p):
        """The error for a gradient the update would misuse: broadcast into the parameter, cast, or not an array."""
        name, grad = f"{type(self).__name__}.step", p.grad
        if backend.device_of(grad) != p.device:
            raise TypeError(f"{name}: parameter {i} (shape {p.shape}, on {p.device}) has a gradient that is "
                            f"a {type_name(grad)}; .grad must be an array on the parameter's device")
        if grad.shape != p.shape:
            raise ValueError(f"{name}: parameter {i} has shape {p.shape} but its gradient {grad.shape}; "
                             "a gradient must have its parameter's shape (it is never broadcast into the update)")
        if grad.dtype != p.dtype:
            raise TypeError(f"{name}: parameter {i} is {p.dtype} but its gradient {grad.dtype}; "
                            f"give it a {p.dtype} gradient")

    def _check_group(self, group):
        """Refuse hyper-parameters that make no sense, naming the one at fault."""
        name = type(self).__name__
        check(name, "lr", group["lr"], "[0, inf)")
        check(name, "weight_decay", group["weight_decay"], "[0, inf)")

    def _update_group(self, group, params):
        """Update `params`, the group's parameters that have gradients: one by one, unless an optimizer knows
        better."""
        for p in params:
            self._update(p, p.grad, self.state.setdefault(p, {}), group)

    def _update(self, p, grad, state, group):
        raise NotImplementedError

    def state_dict(self):
        """Hyper-parameters and buffers as plain values and host arrays (parameters by position)."""
        params, starts = self._params(), [0]
        for g in self.param_groups:
            starts.append(starts[-1] + len(g["params"]))
        return {
            "steps": self.steps,
            # each group's settings, and its parameters' positions, as PyTorch numbers them
            "param_groups": [{**{k: v for k, v in g.items() if k != "params"}, "params": list(range(start, end))}
                             for g, start, end in zip(self.param_groups, starts, starts[1:])],
            "state": {i: {k: _host_copy(v) for k, v in self.state[p].items()}
                      for i, p in enumerate(params) if p in self.state},
        }

    def load_state_dict(self, state_dict):
        """Take what `state_dict()` gave, all of it checked first: a refused state dict changes nothing."""
        name, params = f"{type(self).__name__}.load_state_dict", self._params()
        keys = ("steps", "param_groups", "state")
        if not isinstance(state_dict, dict) or set(state_dict) != set(keys):
            got = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict).__name__
            raise ValueError(f"{name}: expected a dict with keys {', '.join(keys)} (what state_dict() gives), "
                             f"got {got}")
        check(name, "steps", state_dict["steps"], "[0, inf)", integer=True)
        saved_groups, state = state_dict["param_groups"], state_dict["state"]
        if not isinstance(saved_groups, (list, tuple)):
            raise ValueError(f"{name}: param_groups must be a list of dicts, got a {type(saved_groups).__name__}")
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"{name}: {len(saved_groups)} groups in the checkpoint, {len(self.param_groups)} here")
        settings, start = [], 0
        for g, (group, saved) in enumerate(zip(self.param_groups, saved_groups)):
            if not isinstance(saved, dict) or set(saved) - {"params"} != set(self.defaults):
                got = sorted(saved) if isinstance(saved, dict) else f"a {type(saved).__name__}"
                raise ValueError(f"{name}: group {g} must hold the settings {', '.join(self.defaults)}, got {got}")
            # its parameters' positions, the ones this optimizer gives them (a state dict from before they were
            # saved has none)
            here = list(range(start, start + len(group["params"])))
            start += len(here)
            given = saved.get("params", here)
            if not isinstance(given, (list, tuple)) or len(given) != len(here):
                got = len(given) if isinstance(given, (list, tuple)) else f"a {type(given).__name__}"
                raise ValueError(f"{name}: group {g} holds {got} parameters in the state dict but "
                                 f"{len(here)} here; build the optimizer's groups as the saved run did")
            if any(type(i) is not int or i != j for i, j in zip(given, here)):
                raise ValueError(f"{name}: group {g} holds the parameters numbered {_positions(given)} in the state "
                                 f"dict but {_positions(here)} here; build the optimizer's groups as the saved run did")
            settings.append({k: v for k, v in saved.items() if k != "params"})
            self._check_group({**group, **settings[-1]})  # a checkpoint's hyper-parameters pass the constructor's checks
        if not isinstance(state, dict):
            raise ValueError(f"{name}: state must be a dict of parameter index → buffers, got {type(state).__name__}")
        for i, buffers in state.items():
            if not isinstance(i, numbers.Integral) or isinstance(i, bool) or not 0 <= i < len(params):
                raise ValueError(f"{name}: state for parameter {i!r}, but there are {len(params)} parameters")
            self._check_state(name, int(i), params[int(i)], buffers)
        for group, saved in zip(self.param_groups, settings):
            group.update(saved)
        self.steps = int(state_dict["steps"])
        self.state = {params[int(i)]: {k: _param_copy(v, params[int(i)]) for k, v in s.items()}
                      for i, s in state.items()}

    def _check_state(self, name, i, p, buffers):
        """One parameter's saved state: none yet, or every buffer and counter this optimizer keeps, fitting p."""
        wanted = {*self.buffers, *self.counters}
        if not isinstance(buffers, dict) or set(buffers) not in (set(), wanted):
            got = sorted(buffers) if isinstance(buffers, dict) else f"a {type(buffers).__name__}"
            raise ValueError(f"{name}: the state of parameter {i} must be empty or hold "
                             f"{', '.join(sorted(wanted))}, got {got}")
        for key, value in buffers.items():
            if key in self.counters:
                check(name, f"{key} of parameter {i}", value, "[0, inf)", integer=True)
            elif backend.device_of(value) is None:
                raise ValueError(f"{name}: {key} of parameter {i} must be an array, got a {type(value).__name__}")
            elif value.shape != p.shape:
                raise ValueError(f"{name}: {key} of parameter {i} has shape {value.shape}, the parameter {p.shape}")
            elif value.dtype.kind != "f":  # a float buffer of another precision is cast to the parameter's
                raise ValueError(f"{name}: {key} of parameter {i} is {value.dtype}; it must be floating point, "
                                 f"like the parameter ({p.dtype})")
            # a step from a NaN moment, or from the square root of a negative one, makes every weight NaN, and the
            # run that resumed it, not the state, would take the blame; judged as the parameter's dtype, which the
            # buffer is cast to (a float64 1e39 is a float32 inf)
            elif not bool((abs(value) <= backend.xp_for(backend.device_of(value)).finfo(p.dtype).max).all()):
                raise ValueError(f"{name}: {key} of parameter {i} holds NaN or infinite values; the run that saved "
                                 "it had diverged, or the state was changed since: load one saved before that")
            elif key in self.squares and bool((value < 0).any()):
                raise ValueError(f"{name}: {key} of parameter {i} holds negative values, where it averages squares; "
                                 "the state was changed since it was saved: load an unchanged one")


def _many_kernel_reads(arrays):
    """Whether the CPU's kernels over a list of arrays (adamw_many, clip_many) can read every one of `arrays`
    through its address: NumPy, float32, C-contiguous."""
    return all(type(a) is np.ndarray and a.dtype == np.float32 and a.flags.c_contiguous for a in arrays)


def _positions(numbers):
    """A group's parameter positions in a line: a run as its ends, anything else as its first few."""
    numbers = list(numbers)
    if not numbers:
        return "none"
    if all(type(i) is int for i in numbers) and numbers == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"{numbers[0]} to {numbers[-1]}"
    return repr(numbers[:8])[:-1] + (", …]" if len(numbers) > 8 else "]")


class SGD(Optimizer):
    """p ← p − lr·b, b = momentum·b + (g + weight_decay·p) (b = g + weight_decay·p on the first step, and
    without momentum: plain SGD)."""

    buffers = ("momentum_buffer",)

    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0):
        super().__init__(params, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay})

    def _check_group(self, group):
        super()._check_group(group)
        check("SGD", "momentum", group["momentum"], "[0, 1)")  # at 1 the velocity never forgets and diverges

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
    size, which is the same update with one pass fewer. Where a fused kernel
    serves, one call per parameter does it all: CUDA's on a GPU
    (autograd/kernels/cuda.py), numba's on the CPU for float32 from 1K elements
    (autograd/kernels/cpu.py). On the CPU one call steps a whole group
    instead, where its largest parameter has 1K elements or more and every
    array is C-contiguous float32 (`_update_group`).

    `flat_grads=True` keeps every gradient as a view of one array (a
    GradBuffer): zero_grad() zeroes it instead of dropping the gradients, so a
    parameter that backward does not reach is still stepped, with a zero
    gradient. clip_grad_norm_ then reads the buffer in one reduction and
    scales it in one pass, and from the first step each parameter's .data and moments are views of
    flat arrays too, so that the kernel steps each group in one call (an
    array put in place of a parameter's .data since is copied in).
    """

    buffers, squares, counters = ("exp_avg", "exp_avg_sq"), ("exp_avg_sq",), ("step",)
    _flat = None  # with flat_grads, from the first step: the parameters and moments as views of flat arrays

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, flat_grads=False):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        if flat_grads:
            self.grad_buffer = GradBuffer(self._params())

    def step(self):
        """As Optimizer.step; with flat_grads, one kernel call per group where `_step_flat` can."""
        if not self._step_flat():
            super().step()

    def _step_flat(self):
        """With flat_grads, each group's parameters updated by one call of the fused kernel over the group's span
        of four flat arrays: the gradients' buffer, and the parameters and both moments, kept as views of three
        more (`_FlatState`). The main job's 52 parameters took 52 calls, 34 of them composed (too small for the
        kernel): 0.70 ms against 0.19 for the two calls (alone, its arrays in cache). False, with nothing changed
        but the links (`_FlatState.link`), where no kernel serves the buffer, a gradient is not the buffer's view,
        or a group's parameters have taken different numbers of steps (a state dict that says so):
        Optimizer.step then updates them one by one."""
        buffer = self.grad_buffer
        if buffer is None or list(map(id, buffer.params)) != list(map(id, self._params())):
            return False
        kernel = kernels.fused("adamw", buffer.flat)
        if kernel is None or any(p.grad is not view for p, view in zip(buffer.params, buffer.views)):
            return False
        if self._flat is None:
            self._flat = _FlatState(buffer)
        if not self._flat.link(self.state):
            return False
        groups = [[self.state[p] for p in group["params"]] for group in self.param_groups]
        if any(len({state["step"] for state in states}) > 1 for states in groups):
            return False
        self.steps += 1
        start = 0
        for group, states in zip(self.param_groups, groups):
            if not states:  # a group left empty (LoRA freezes every bias and norm: no-decay holds nothing)
                continue
            end = start + sum(p.size for p in group["params"])
            for state in states:
                state["step"] += 1
            decay, eps, step_size = self._factors(group, states[0]["step"])
            span = slice(start, end)
            kernel(buffer.flat[span], decay, *group["betas"], eps, step_size, self._flat.params[span],
                   self._flat.exp_avg[span], self._flat.exp_avg_sq[span])
            start = end
        for p in buffer.params:
            p.mark_changed()
        return True

    def _check_group(self, group):
        super()._check_group(group)
        if not isinstance(group["betas"], (tuple, list)) or len(group["betas"]) != 2:
            raise ValueError(f"AdamW: betas must be a pair (beta1, beta2), got {group['betas']!r}")
        for i, beta in enumerate(group["betas"]):
            check("AdamW", f"betas[{i}]", beta, "[0, 1)")  # at 1 the bias correction divides by 1 − 1 = 0
        # eps = 0 divides 0 by 0 where a gradient is exactly 0 from the start (a parameter that flat_grads steps
        # without backward reaching it, a dead unit): those weights become NaN at the first step
        check("AdamW", "eps", group["eps"], "(0, inf)")

    @staticmethod
    def _factors(group, t):
        """(decay, eps, step size) of step t: the docstring's update with √(1−β₂ᵗ) moved into eps and the step."""
        lr, (beta1, beta2) = group["lr"], group["betas"]
        root_bc2 = math.sqrt(1 - beta2 ** t)
        return 1 - lr * group["weight_decay"], group["eps"] * root_bc2, -(lr / (1 - beta1 ** t)) * root_bc2

    def _update_group(self, group, params):
        """Where the CPU kernel over many arrays serves, one call for all of `params` that have taken as many steps
        (each gradient, weight and moment C-contiguous float32): a small parameter's composed update cost 12–14 µs
        and a kernel call 4, and in the main job's step the 52 parameters took 1.2–1.3 ms one by one against
        0.6–0.8 in one call. Else one by one."""
        kernel = params and kernels.fused("adamw_many", max((p.data for p in params), key=lambda w: w.size))
        states = [self._moments(p) for p in params] if kernel else []
        arrays = [(p.grad, p.data, state["exp_avg"], state["exp_avg_sq"]) for p, state in zip(params, states)]
        if not kernel or not _many_kernel_reads([a for four in arrays for a in four]):
            super()._update_group(group, params)
            return
        by_step = {}  # the step each will take: a group's parameters may have taken different numbers
        for state, four in zip(states, arrays):
            state["step"] += 1
            by_step.setdefault(state["step"], []).append(four)
        for step, rows in by_step.items():
            grads, weights, exp_avgs, exp_avg_sqs = zip(*rows)
            decay, eps, step_size = self._factors(group, step)
            kernel(grads, decay, *group["betas"], eps, step_size, weights, exp_avgs, exp_avg_sqs)

    def _moments(self, p):
        """p's state, its moments made (zeros) before its first step."""
        state = self.state.setdefault(p, {})
        if not state:
            xp = backend.xp_for(p.device)
            state.update(step=0, exp_avg=xp.zeros(p.shape, p.dtype), exp_avg_sq=xp.zeros(p.shape, p.dtype))
        return state

    def _update(self, p, grad, state, group):
        xp = backend.xp_for(p.device)
        beta1, beta2 = group["betas"]
        if not state:
            self._moments(p)
        state["step"] += 1
        decay, eps, step_size = self._factors(group, state["step"])
        kernel = kernels.fused("adamw", p.data)
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


_buffers = weakref.WeakSet()  # every live GradBuffer: clip_grad_norm_ recognises gradients that are one's views


class GradBuffer:
    """Every gradient of `params` as a view of one flat array (`flat`), for one reduction over them all.

    `zero_()` fills the array with zeros and points each parameter's .grad at
    its view; backward then adds into the views in place, as into any
    existing .grad.
    """

    def __init__(self, params):
        params = list(params)
        kinds = {(p.device, p.dtype) for p in params}
        if len(kinds) != 1:
            raise ValueError(f"GradBuffer: the parameters must share one device and dtype to share a buffer, "
                             f"got {sorted(map(str, kinds))}; make one optimizer per device and dtype")
        self.device, dtype = kinds.pop()
        self.flat = backend.xp_for(self.device).zeros(sum(p.size for p in params), dtype=dtype)
        self.params, self.spans, offset = params, [], 0  # spans[i]: the slice of `flat` that holds params[i]'s
        for p in params:
            self.spans.append(slice(offset, offset + p.size))
            offset += p.size
        self.views = [self.flat[span].reshape(p.shape) for p, span in zip(params, self.spans)]
        self.ids = frozenset(map(id, self.views))
        _buffers.add(self)

    def zero_(self):
        self.flat.fill(0)
        for p, view in zip(self.params, self.views):
            if p.device != self.device or p.data.dtype != view.dtype:  # else backward blames the caller's zero_grad
                raise RuntimeError(f"zero_grad: a parameter of shape {p.shape} is now {p.dtype} on {p.device}, and "
                                   f"the optimizer keeps the gradients (flat_grads) in one {view.dtype} array on "
                                   f"{self.device}: the model was moved or cast (Module.to) after the optimizer was "
                                   "made; make the optimizer again")
            p.grad = view


class _FlatState:
    """AdamW's parameters, exp_avg and exp_avg_sq as views of three flat arrays laid out as a GradBuffer's, so
    that one kernel call steps a whole group (AdamW._step_flat)."""

    def __init__(self, buffer):
        xp = backend.xp_for(buffer.device)
        self.buffer = buffer
        self.params, self.exp_avg, self.exp_avg_sq = (xp.zeros_like(buffer.flat) for _ in range(3))
        self.views = [tuple(flat[span].reshape(p.shape) for flat in (self.params, self.exp_avg, self.exp_avg_sq))
                      for p, span in zip(buffer.params, buffer.spans)]

    def link(self, state):
        """Point each parameter's .data and state at its views, copying in what was set since (a loaded state
        dict, a model's load_state_dict); a first step's moments start at 0. False where a parameter no longer
        fits its view (another shape, dtype or device): nothing is linked then."""
        pairs = list(zip(self.buffer.params, self.views))
        if any(p.data is not w and (p.shape != w.shape or p.data.dtype != w.dtype or p.device != self.buffer.device)
               for p, (w, _, _) in pairs):
            return False
        for p, (w, m, v) in pairs:
            if p.data is not w:
                w[...] = p.data
                p.data = w
            buffers = state.setdefault(p, {})
            if not buffers:
                m[...] = 0
                v[...] = 0
                buffers.update(step=0, exp_avg=m, exp_avg_sq=v)
            for key, view in (("exp_avg", m), ("exp_avg_sq", v)):
                if buffers[key] is not view:
                    view[...] = buffers[key]
                    buffers[key] = view
        return True


def clip_grad_norm_(params, max_norm):
    """Scale all gradients together so their global L2 norm is at most `max_norm`; returns the norm before.

    `params` is an iterable of parameters or, as in PyTorch, one parameter.
    The norm is a NumPy float64 (a float with `.item()`, as PyTorch's tensor
    has), or on a GPU's fused path a 0-d device array.
    When the gradients are exactly the views of an AdamW's flat buffer
    (flat_grads=True), one fused reduction reads the buffer and one pass
    scales it. On a GPU two kernels compute the norm and the factor on the
    device, the buffer is scaled by the factor there, and the norm comes back
    as a 0-d device array (no copy to the host, so no wait for the GPU); on
    the CPU, numba's kernel sums fixed blocks of the buffer, the same bits on
    any thread count. Other float32 gradients on the CPU are summed and scaled by
    the same kernels in one call each, every gradient cut into blocks of its own.
    """
    check("clip_grad_norm_", "max_norm", max_norm, "(0, inf]")
    # iterating a tensor would give its rows, which have no gradients
    params = [params] if isinstance(params, Tensor) else list(params)
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):  # PyTorch's parameters would pass as ones without gradients: a norm of 0
            raise TypeError(f"clip_grad_norm_: parameter {i} is a {type_name(p)}, not an nn.Parameter (an autograd "
                            "Tensor)")
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return np.float64(0.0)
    ids = frozenset(map(id, grads))
    buffer = next((b for b in _buffers if b.ids == ids), None)
    kernel = None if buffer is None else kernels.fused("grad_norm", buffer.flat)
    if kernel is not None:
        norm, scale = kernel(buffer.flat, max_norm)
        if buffer.device != "cpu" or not scale[0] >= 1:  # on the CPU a factor of 1 saves the pass; NaN passes on
            buffer.flat *= scale
        return norm[0]
    if _many_kernel_reads(grads):
        kernel = kernels.fused("clip_many", max(grads, key=lambda g: g.size))  # the CPU's, for all in one call
        if kernel is not None:
            return np.float64(kernel(grads, max_norm))
    xp = backend.xp_for(backend.device_of(grads[0]))
    # A dot product per cache-sized piece (one pass, no temporary), summed in float64 for accuracy;
    # one read back from a GPU, not one per tensor.
    # float16's squares overflow past 256: those pieces are summed in float32
    squares = xp.stack([xp.vdot(piece, piece) for g in grads for (piece,) in backend.pieces(g)
                        for piece in [piece.astype(xp.float32) if piece.dtype.itemsize < 4 else piece]])
    total = math.sqrt(float(squares.sum(dtype=xp.float64)))
    scale = max_norm / (total + 1e-6)
    if not scale >= 1:  # a NaN norm makes every gradient NaN, as in PyTorch: none is left looking healthy
        for g in grads:
            g *= scale
    return np.float64(total)  # the fused CPU kernel's type


def _check_schedule(owner, max_lr, warmup_steps, decay_steps, min_lr):
    check(owner, "max_lr", max_lr, "[0, inf)")
    check(owner, "warmup_steps", warmup_steps, "[0, inf)", integer=True)
    check(owner, "decay_steps", decay_steps, "[0, inf)", integer=True)
    check(owner, "min_lr", min_lr, "[0, inf)")
    if min_lr > max_lr:
        raise ValueError(f"{owner}: min_lr {min_lr!r} exceeds max_lr {max_lr!r}; the cosine decays from max_lr "
                         "down to min_lr")


def warmup_cosine(step, max_lr, warmup_steps, decay_steps, min_lr=0.0):
    """Linear warmup to `max_lr`, then cosine decay to `min_lr` at `decay_steps`, flat after."""
    check("warmup_cosine", "step", step, "[0, inf)", integer=True)
    _check_schedule("warmup_cosine", max_lr, warmup_steps, decay_steps, min_lr)
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= decay_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (max_lr - min_lr)


class WarmupCosineLR:
    """Sets the groups' lr from `warmup_cosine` each time `step()` is called (once per iteration).

    Constructing it sets the lr of step `last_step + 1`: step 0 for a fresh run,
    or the step a resumed run continues from (as PyTorch's `last_epoch`).
    `max_lr` and `min_lr` are the first group's; a fresh run's max_lr defaults
    to that group's lr, and a resumed run must give it (its groups' lrs are then
    the schedule's of some step, not its peak: PyTorch asks for `initial_lr`).
    Every other group keeps the ratio its lr had to the first's at
    construction, as PyTorch's schedulers keep each group's own. Every argument
    is checked here, not at the first step that would trip on it.
    """

    def __init__(self, optimizer, warmup_steps, decay_steps, min_lr=0.0, max_lr=None, last_step=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"WarmupCosineLR: optimizer must be an nn.optim optimizer, got {type_name(optimizer)}")
        check("WarmupCosineLR", "last_step", last_step, "[-1, inf)", integer=True)
        if max_lr is None and last_step >= 0:
            raise ValueError(f"WarmupCosineLR: resuming at last_step={last_step} needs max_lr: the optimizer's lr is "
                             "then the schedule's at some step, not its peak; pass the run's max_lr")
        first = optimizer.param_groups[0]["lr"]
        max_lr = first if max_lr is None else max_lr
        _check_schedule("WarmupCosineLR", max_lr, warmup_steps, decay_steps, min_lr)
        if not first and any(group["lr"] for group in optimizer.param_groups):
            raise ValueError("WarmupCosineLR: the first group's lr is 0, so the other groups' lrs have no ratio to it; "
                             "give the first group the lr of the schedule's peak")
        self.optimizer, self.max_lr = optimizer, max_lr
        self.warmup_steps, self.decay_steps, self.min_lr = warmup_steps, decay_steps, min_lr
        self.ratios = [group["lr"] / first if first else 1.0 for group in optimizer.param_groups]
        self.last_step = last_step
        self.step()

    def get_lr(self, step):
        return warmup_cosine(step, self.max_lr, self.warmup_steps, self.decay_steps, self.min_lr)

    def step(self):
        groups = self.optimizer.param_groups
        if len(groups) != len(self.ratios):  # a group added since has no ratio to the first's lr
            raise ValueError(f"WarmupCosineLR.step: the optimizer has {len(groups)} parameter groups, the schedule "
                             f"was built for {len(self.ratios)}; build the schedule after adding every group")
        self.last_step += 1
        lr = self.get_lr(self.last_step)
        for group, ratio in zip(groups, self.ratios):
            group["lr"] = lr * ratio
        return lr

    def state_dict(self):
        return {"last_step": self.last_step}

    def load_state_dict(self, state):
        if not isinstance(state, dict) or set(state) != {"last_step"}:
            got = sorted(state) if isinstance(state, dict) else f"a {type(state).__name__}"
            raise ValueError(f"WarmupCosineLR.load_state_dict: expected {{'last_step': n}} (what state_dict() "
                             f"gives), got {got}")
        check("WarmupCosineLR.load_state_dict", "last_step", state["last_step"], "[0, inf)", integer=True)
        self.last_step = state["last_step"] - 1
        self.step()
