"""LoRA: a frozen Linear plus a trainable low-rank update, and `lora(model, …)` to put one in every layer named.

    y = x @ W + b + (α/r) · (x @ A) @ B          W (in, out) and b frozen; A (in, r), B (r, out) trained

The update ΔW = (α/r)·A·B is the paper's B·A for this project's (in, out)
weights; B starts at zero, so before the first step the model is exactly the
base. Its VJP, for the upstream gradient G = ∂L/∂y (composed from matmuls, so
the engine applies it):

    ∂L/∂A = (α/r) · xᵀ (G Bᵀ)     ∂L/∂B = (α/r) · (x A)ᵀ G     ∂L/∂x = G Wᵀ + (α/r) · G Bᵀ Aᵀ

`merge()` folds ΔW into W (one matmul per forward, as the base had) and
`unmerge()` restores the base weight exactly; a second call of either does
nothing. While merged, the base lies outside the parameters, where no state
dict reaches it, so `state_dict()` and `load_state_dict()` refuse the model
until `unmerge()`. Only A and B require grad, so an optimizer given
`[p for p in model.parameters() if p.requires_grad]` holds moments for the
adapters alone.
"""
import math
import numbers
from collections.abc import Iterable

import numpy as np

import autograd as ag
from autograd import backend

from .layers import Linear
from .module import Parameter, type_name


class LoRALinear(Linear):
    """A Linear whose weight and bias are frozen, plus the rank-`r` update (α/r)·A·B (see the module's docstring).

    Its parameters keep the base layer's names (`weight`, `bias`), so a
    checkpoint's keys are unchanged, and add `lora_A` and `lora_B`.
    """

    def __init__(self, base, r, alpha):
        if not isinstance(base, Linear):
            raise TypeError(f"LoRALinear: wraps an nn.Linear, got {type_name(base)}")
        # Integral and Real take NumPy's scalars too (a sweep over np.arange); bool is an Integral, not a rank
        if isinstance(r, bool) or not isinstance(r, numbers.Integral) \
                or not 1 <= r <= min(base.in_features, base.out_features):
            raise ValueError(f"LoRALinear: r must be an integer in [1, {min(base.in_features, base.out_features)}] "
                             f"for a {base.in_features} → {base.out_features} layer, got {r!r}")
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 < alpha < math.inf:
            raise ValueError(f"LoRALinear: alpha must be a positive number, got {alpha!r}")
        # the forward scales (x A) B by α/r cast to the weights' dtype: at inf, step 0's B = 0 makes NaN, and at 0
        # every adapter gradient is 0, so nothing trains
        limits = np.finfo(base.weight.dtype)  # as Python floats: NumPy would cast the scale to the dtype, warning
        scale, least, most = float(alpha) / int(r), float(limits.smallest_subnormal), float(limits.max)
        if not least <= scale <= most:
            raise ValueError(f"LoRALinear: the scale alpha/r = {alpha!r}/{r!r} = {scale:.3g} rounds to "
                             f"{'inf' if scale > most else '0'} in the layer's {base.weight.dtype} weights; "
                             f"give an alpha for which alpha/r lies in [{least:.3g}, {most:.3g}]")
        super(Linear, self).__init__()  # Module's: the weights come from `base`, not a fresh initialisation
        self.in_features, self.out_features = base.in_features, base.out_features
        # Python's int and float: a NumPy scalar's dtype would take part in the casts of every forward and merge
        self.r, self.alpha, self.scale = int(r), float(alpha), scale
        self.weight = Parameter(base.weight.data, requires_grad=False)
        bias = None if base.bias is None else Parameter(base.bias.data, requires_grad=False)
        self.register_parameter("bias", bias)
        device, dtype = base.weight.device, base.weight.dtype
        bound = 1 / math.sqrt(self.in_features)  # PEFT's (Kaiming-uniform) scale for A; B = 0
        self.lora_A = Parameter(ag.rand(self.in_features, r, dtype=dtype, device=device) * (2 * bound) - bound)
        self.lora_B = Parameter(ag.zeros(r, self.out_features, dtype=dtype, device=device))
        self._unmerged_weight = None  # the base weight while merged

    @property
    def merged(self):
        return self._unmerged_weight is not None

    def forward(self, x):
        y = ag.linear(x, self.weight, self.bias)
        if self.merged:
            return y
        return y + (x @ self.lora_A) @ self.lora_B * self.scale

    def delta(self):
        """ΔW = (α/r)·A·B, the (in, out) array the adapters add to the weight."""
        return (self.lora_A.data @ self.lora_B.data) * self.scale

    def merged_weight(self):
        """W + ΔW: the one weight that computes this layer's function (what `merge()` puts in place)."""
        if self.merged:
            return self.weight.data
        return self.weight.data + self.delta().astype(self.weight.dtype)

    def merge(self):
        """Fold ΔW into the weight: the same function, one matmul. Training goes on only after `unmerge()`."""
        if not self.merged:
            merged = self.merged_weight()  # computed first: a failure changes nothing
            self._unmerged_weight, self.weight.data = self.weight.data, merged
        return self

    def unmerge(self):
        """The base weight back, exactly as it was before `merge()`, on the device and in the dtype the merged weight
        has since been moved or cast to: Module.to and a cast move parameters, and the base kept aside is not one."""
        if self.merged:
            base = backend.to_device(self._unmerged_weight, self.weight.device).astype(self.weight.dtype, copy=False)
            self.weight.data, self._unmerged_weight = base, None
        return self

    def _state_refusal(self):
        if self.merged:
            return ("merged LoRA (merge()): each weight holds W + ΔW beside the lora_A and lora_B that make ΔW, so an "
                    "unmerged copy loading this state would add ΔW twice, and a weight loaded into a merged layer "
                    "would give way to the old base at unmerge(); call unmerge() first (and merge() again after), "
                    "or read merged_weight()")
        return None

    def extra_repr(self):
        return f"{super().extra_repr()}, r={self.r}, alpha={self.alpha}{', merged' if self.merged else ''}"


def lora(model, r, alpha, targets):
    """Replace every nn.Linear whose attribute name is in `targets` (e.g. ("c_attn",)) with a LoRALinear of it.

    Every other parameter of `model` is frozen, but for the adapters of an earlier
    call, which train on with the new ones. Returns the names of the layers
    replaced; a target that names no Linear in the model is an error, as is one
    whose layers an earlier call adapted (a call cannot re-rank them). A call
    that fails changes nothing: every adapter is built, and every target found,
    before the model is touched.
    """
    names = (targets,) if isinstance(targets, str) else tuple(targets) if isinstance(targets, Iterable) else None
    if names is None or not all(isinstance(t, str) for t in names):
        raise TypeError("lora: targets are attribute names of Linear layers, a str or a list of them such as "
                        f"('c_attn',); got {targets!r}")
    if not names:
        raise ValueError("lora: targets is empty; name the Linear layers to adapt, e.g. ('c_attn',)")
    planned, found, adapted = [], set(), set()
    for name, module in model.named_modules():
        for child_name, child in module._modules.items():
            if child_name in names and isinstance(child, LoRALinear):
                adapted.add(child_name)
            elif child_name in names and isinstance(child, Linear):
                planned.append((module, child_name, f"{name}.{child_name}" if name else child_name, child))
                found.add(child_name)
    already = [t for t in names if t in adapted and t not in found]
    if already:
        raise ValueError(f"lora: the {', '.join(map(repr, already))} layers of {type(model).__name__} are adapted "
                         "already (nn.LoRALinear); leave them out of targets (their adapters train on), or adapt a "
                         "fresh copy of the base model for another rank or alpha")
    missing = [t for t in names if t not in found]
    if missing:
        raise ValueError(f"lora: no nn.Linear named {', '.join(map(repr, missing))} in {type(model).__name__}")
    adapters = [LoRALinear(child, r, alpha) for _, _, _, child in planned]  # r and alpha are checked here
    earlier = {id(p) for m in model.modules() if isinstance(m, LoRALinear) for p in (m.lora_A, m.lora_B)}
    for p in model.parameters():
        if id(p) not in earlier:  # a second call adds adapters; it must not stop the first call's from training
            p.requires_grad = False
    for (module, child_name, _, _), adapter in zip(planned, adapters):
        setattr(module, child_name, adapter)
    return [full_name for _, _, full_name, _ in planned]
