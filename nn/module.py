"""Module and Parameter: models as trees of named parameters, as PyTorch users know them.

A Module registers every Parameter and sub-Module assigned to one of its
attributes, so `named_parameters()` can give each weight its dotted name
(`transformer.h.0.attn.c_attn.weight`), the name checkpoints use. Calling a
module runs its `forward` inside `autograd.name_scope`, so every op it records
remembers which module made it (what `viz.graph --collapse` draws as a box).

The tensors a recorded forward makes are named from the tree and the code, as
parameters are, so a model names nothing itself: a module's output after the
module and its forward's first argument (`transformer.h.0.ln_1(x)`), and what a
forward holds in a local variable when it returns after the module and the
variable (`transformer.h.0.attn.q`; the last variable wins where one tensor has
two). Under no_grad nothing is named, and generation pays nothing for it.
"""
import sys
import threading
from collections import OrderedDict, namedtuple
from collections.abc import Mapping

import numpy as np

import autograd as ag
from autograd import Tensor, backend


class _Running(threading.local):
    """The forwards on this thread's call stack: a model another thread calls meanwhile is a root of its own, named
    and scoped as if it ran alone (each thread's name scopes are its own, autograd.name_scope)."""

    def __init__(self):
        self.forwards = []  # [module, its forward's frame or None] for each forward running, outermost first


_running = _Running()
_tree_version = 0  # bumped whenever a module gains or loses an attribute: the names may have changed


def _catch_frame(running):
    """Keep the frame of the running module's forward, found as the caller of a module it calls; read at its end.

    A frame outlives its function's return with its locals, so the caller reads
    them once forward has returned. A module called from elsewhere (ag.checkpoint's
    recompute, a helper method) has another caller, which is not kept."""
    frame = sys._getframe(2)  # 0 this function, 1 the callee's __call__, 2 who called it
    if frame.f_code is type(running[0]).forward.__code__:
        running[1] = frame


class Parameter(Tensor):
    """A Tensor that a Module owns and an optimizer updates: requires grad unless told otherwise."""

    __slots__ = ()

    def __init__(self, data, requires_grad=True):
        super().__init__(data, requires_grad=requires_grad)


def zero_gradient(t):
    """Fill t's gradient with zeros: in place, so views of one flat buffer stay its views; a gradient that
    backward(create_graph=True) left, a Tensor, becomes zeros without its graph, as in PyTorch."""
    if isinstance(t.grad, Tensor):
        t.grad = backend.xp_for(t.device).zeros_like(t.data)
    else:
        t.grad[...] = 0


IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def type_name(value):
    """The name of value's type for a message: bare for Python's and this engine's own types, with its module for
    any other, so that PyTorch's Parameter reads torch.nn.parameter.Parameter where an nn.Parameter was asked for."""
    kind = type(value)
    if kind.__module__ == "builtins" or kind.__module__.partition(".")[0] in ("autograd", "nn"):
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def _host(value):
    """A state dict's value as a host array, to compare two of them."""
    return backend.to_host(value.data if isinstance(value, Tensor) else value)


def _tree_changed():
    global _tree_version
    _tree_version += 1


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_scope_name", "")
        object.__setattr__(self, "_named_at", None)  # the _tree_version at which this root last named its tree
        object.__setattr__(self, "_parameters_at", None)  # the _tree_version of the list parameters() keeps

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before assigning attributes")
        params, modules = self._parameters, self._modules
        if name in params and not (value is None or isinstance(value, Parameter)):
            raise TypeError(f"{type(self).__name__}.{name} is a Parameter: assign an nn.Parameter (or None), not a "
                            f"{type_name(value)}, or it would drop out of parameters() and state_dict(); to "
                            f"change its values, assign {name}.data")
        if name in modules and not (value is None or isinstance(value, Module)):
            held = "set to None" if modules[name] is None else type(modules[name]).__name__
            raise TypeError(f"{type(self).__name__}.{name} is a sub-module ({held}): assign "
                            f"a Module (or None), not a {type_name(value)}, or its parameters would drop out "
                            "of parameters() and state_dict()")
        _tree_changed()
        # A name already registered keeps its place in the order (parameters(), state_dict()), as in PyTorch;
        # a parameter or sub-module set to None keeps its slot, so that only its own kind can fill it again
        if isinstance(value, Parameter) or (value is None and name in params):
            modules.pop(name, None)
            params[name] = value
        elif isinstance(value, Module) or (value is None and name in modules):
            params.pop(name, None)
            modules[name] = value
        object.__setattr__(self, name, value)

    def register_parameter(self, name, param):
        """Register `param` (a Parameter, or None for an empty slot, a layer without a bias) as attribute `name`."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"{type(self).__name__}.register_parameter: {name!r} must be an nn.Parameter or None, "
                            f"not a {type_name(param)}")
        self._parameters.setdefault(name, None)
        setattr(self, name, param)

    def __delattr__(self, name):
        _tree_changed()
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        object.__delattr__(self, name)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        forwards = _running.forwards
        if not forwards and not self._scope_name and self._named_at != _tree_version:
            self._name_tree()  # a root (a sub-module called alone keeps the names its root gave it)
            object.__setattr__(self, "_named_at", _tree_version)
        # nothing is recorded, so no op needs to know which module made it; but anomaly mode names the module
        # where an op made a NaN, recorded or not
        if not ag.is_grad_enabled() and not ag.is_anomaly_enabled():
            return self.forward(*args, **kwargs)
        if forwards and forwards[-1][1] is None:
            _catch_frame(forwards[-1])
        running = [self, None]  # the module, and its forward's frame once a call from that forward catches it
        forwards.append(running)
        try:
            with ag.name_scope(self._scope_name):
                out = self.forward(*args, **kwargs)
        except BaseException:
            running.pop()  # its frame, kept, would hold its arrays in a cycle with this call's until gc ran (see below)
            raise
        finally:
            forwards.pop()
        if running[1] is not None:  # popped, not read: a frame kept here would be in a cycle with this call's
            self._name_locals(running.pop().f_locals)  # own (its f_back), which held each step's arrays until gc ran
        if isinstance(out, Tensor):
            self._name_output(out)
        return out

    def _made_here(self, t):
        """Whether `t` is an unnamed tensor that an op recorded inside this module's forward made."""
        if not isinstance(t, Tensor) or t.name is not None or t.op is None:
            return False
        scope, mine = t.op.scope, self._scope_name
        return not mine or scope == mine or scope.startswith(mine + ".")

    def _name_output(self, out):
        if self._scope_name and self._made_here(out):
            argument = type(self).forward.__code__.co_varnames[1:2] or ("",)
            out.name = f"{self._scope_name}({argument[0]})"

    def _name_locals(self, variables):
        names = {}
        for variable, value in variables.items():
            if variable != "self" and self._made_here(value):
                names[id(value)] = value, variable  # a later variable holding the same tensor wins
        prefix = self._scope_name + "." if self._scope_name else ""
        for value, variable in names.values():
            value.name = prefix + variable

    def _name_tree(self):
        """Give every sub-module its scope name and every parameter its dotted name, from this root."""
        for name, module in self.named_modules():
            object.__setattr__(module, "_scope_name", name)
        for name, param in self.named_parameters():
            param.name = name

    def named_modules(self, prefix=""):
        """(dotted name, module) for this module and every descendant, each once, in registration order."""
        seen, stack = set(), [(prefix, self)]
        while stack:
            name, module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            children = [(f"{name}.{child}" if name else child, m) for child, m in module.named_children()]
            stack.extend(reversed(children))

    def modules(self):
        return [m for _, m in self.named_modules()]

    def children(self):
        return [module for _, module in self.named_children()]

    def named_children(self):
        """(attribute name, sub-module) for each sub-module this module holds itself, in registration order (a slot
        set to None holds none)."""
        return [(name, module) for name, module in self._modules.items() if module is not None]

    def apply(self, fn):
        """Call `fn` on every sub-module, then on this module, as PyTorch does (nanoGPT initialises its weights with
        `self.apply(self._init_weights)`); returns this module."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def named_parameters(self):
        """(dotted name, parameter) for every parameter, each once even when shared (tied weights)."""
        seen = set()
        for name, param in self._every_named_parameter():
            if id(param) not in seen:
                seen.add(id(param))
                yield name, param

    def _every_named_parameter(self):
        """(dotted name, parameter) under every name a parameter has: a tied weight once for each module holding it."""
        for module_name, module in self.named_modules():
            for name, param in module._parameters.items():
                if param is not None:
                    yield (f"{module_name}.{name}" if module_name else name), param

    def parameters(self):
        """Every parameter once, in named_parameters' order. The list is kept until the tree changes
        (_tree_version): clip_grad_norm_(model.parameters()) asks at every step, and the walk took 133 µs for the
        main job's model."""
        if self._parameters_at != _tree_version:
            object.__setattr__(self, "_parameter_list", [p for _, p in self.named_parameters()])
            object.__setattr__(self, "_parameters_at", _tree_version)
        return list(self._parameter_list)

    def num_parameters(self, trainable=False):
        """How many numbers the parameters hold (with `trainable`, only those that require grad)."""
        return sum(p.size for p in self.parameters() if p.requires_grad or not trainable)

    def _state_refusal(self):
        """Why state_dict() and load_state_dict() must refuse this module as it is now, with the fix; None where they
        need not (a merged nn.LoRALinear refuses)."""
        return None

    def _refuse_state(self, who):
        """Raise, before anything is read or loaded, naming every module of this tree that _state_refusal() refuses."""
        refused = {}
        for name, module in self.named_modules():
            reason = module._state_refusal()
            if reason is not None:
                refused.setdefault(reason, []).append(name or type(module).__name__)
        if refused:
            raise RuntimeError(f"{who}: " + "; ".join(
                ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "") + f": {reason}"
                for reason, names in refused.items()))

    def state_dict(self):
        """Dotted name → the parameter's array (shared, not copied)."""
        self._refuse_state(f"state_dict of {type(self).__name__}")
        return OrderedDict((name, p.data) for name, p in self.named_parameters())

    def load_state_dict(self, state_dict, strict=True):
        """Copy arrays into the parameters by name; checks everything before changing anything.

        A tied weight (one parameter held by two modules) may come under any of
        its names, and two of them that differ are refused. A key that names no
        parameter is unexpected: a PyTorch GPT-2's `lm_head.weight` is one for
        models' GPT, whose LM head is `transformer.wte` itself and no module
        (GPT.from_pretrained checks that it equals wte and drops it; strict=False
        skips it). Returns (missing_keys, unexpected_keys): what strict=False
        skipped, as PyTorch returns them.
        """
        who = f"load_state_dict into {type(self).__name__}"
        self._refuse_state(who)
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"{who}: expected a dict of parameter name → array (what state_dict() gives), "
                            f"got {type(state_dict).__name__}")
        for key, value in state_dict.items():
            # a NumPy scalar is what arithmetic on a 0-d array gives back: state_dict()["scale"] * 2
            if not (isinstance(value, (Tensor, np.generic)) or backend.device_of(value) is not None):
                raise TypeError(f"{who}: {key!r} is a {type_name(value)}, not a NumPy or CuPy "
                                "array or an autograd Tensor; convert it first (a PyTorch tensor: "
                                ".detach().cpu().numpy())")
        own = OrderedDict(self.named_parameters())
        first_name = {id(p): name for name, p in own.items()}
        names = {name: first_name[id(p)] for name, p in self._every_named_parameter()}  # every name → state_dict()'s
        given, came_as = {}, {}  # state_dict()'s name → the value, and the key it came under
        for key, value in state_dict.items():
            name = names.get(key)
            if name in given:
                if not np.array_equal(_host(given[name]), _host(value), equal_nan=True):  # a diverged run's NaNs
                    raise ValueError(f"{who}: {came_as[name]!r} and {key!r} name one tied parameter, but their "
                                     "values differ; keep one of them")
            elif name is not None:
                given[name], came_as[name] = value, key
        missing = [k for k in own if k not in given]
        unexpected = [k for k in state_dict if k not in names]
        wrong = [f"{came_as[k]}: checkpoint {tuple(given[k].shape)} vs model {own[k].shape}"
                 for k in own if k in given and tuple(given[k].shape) != own[k].shape]
        problems = []
        if strict and missing:
            problems.append(f"missing keys {missing}")
        if strict and unexpected:
            problems.append(f"unexpected keys {unexpected}")
        if wrong:
            problems.append(f"mis-shaped keys [{'; '.join(wrong)}]")
        if problems:
            # strict=False skips missing and unexpected keys only: a mis-shaped key never loads
            hint = "" if wrong else " (or pass strict=False to load the keys both have)"
            raise KeyError(f"load_state_dict into {type(self).__name__}: " + ", ".join(problems)
                           + f"; check the model's config matches the checkpoint's{hint}")
        # Convert every array before assigning any, so a value that cannot be converted changes nothing;
        # copied, because the model must not share memory with the dict it loaded.
        arrays = {}
        for name, value in given.items():
            param = own[name]
            try:
                arrays[name] = Tensor(value, dtype=param.dtype, device=param.device).data.copy()
            except (TypeError, ValueError):
                raise ValueError(f"{who}: {came_as[name]!r} could not convert from {value.dtype} to the "
                                 f"parameter's {param.dtype}; give it real numbers, as a state_dict() of this "
                                 "model holds them") from None
        for name, array in arrays.items():
            own[name].data = array
        return IncompatibleKeys(missing, unexpected)

    def train(self, mode=True):
        if not isinstance(mode, bool):  # train("no") would be truthy: training, where eval was meant
            raise ValueError(f"{type(self).__name__}.train: mode must be True or False, got {mode!r}; use .eval() "
                             "for evaluation")
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def to(self, device=None, dtype=None):
        """Move every parameter (and its gradient) to `device` and cast the floating ones to `dtype`, keeping the
        Parameter objects, so ties hold and an optimizer still updates them; `to(dtype)` alone works too, as in
        PyTorch. Make the optimizer after a change of dtype or device: the state it keeps stays as it was."""
        if dtype is None and device is not None and device not in backend.DEVICES:  # to(np.float64): to(dtype)
            device, dtype = None, device
        fix = "pass a device, a floating dtype (np.float64, 'float32', ...) or both: to('cpu', dtype=np.float64)"
        if dtype is not None:
            try:
                dtype = np.dtype(dtype)
            except TypeError:
                raise TypeError(f"{type(self).__name__}.to: {dtype!r} is neither a device {backend.DEVICES} nor a "
                                f"dtype; {fix}") from None
            if dtype.kind != "f":  # a parameter that requires grad must stay floating
                raise TypeError(f"{type(self).__name__}.to: {dtype} is not a floating dtype; {fix}")
        if device is not None:
            backend.check_device(device)
            backend.xp_for(device)  # 'cuda' without CuPy fails here, before any parameter has moved

        def converted(array):
            array = array if device is None else backend.to_device(array, device)
            return array if dtype is None or array.dtype.kind != "f" else array.astype(dtype, copy=False)

        for param in self.parameters():
            param.data = converted(param.data)
            if param.grad is not None:
                param.grad = converted(param.grad.data if isinstance(param.grad, Tensor) else param.grad)
        return self

    def requires_grad_(self, requires_grad=True):
        """Set every parameter's requires_grad (False freezes the module); returns this module."""
        for param in self.parameters():
            param.requires_grad = requires_grad
        return self

    def zero_grad(self, set_to_none=True):
        """Drop every gradient, as PyTorch does by default; set_to_none=False fills them with zeros instead."""
        for param in self.parameters():
            if set_to_none or param.grad is None:
                param.grad = None
            else:
                zero_gradient(param)

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}" + (")" if not self._modules else "")]
        for name, module in self._modules.items():
            child = repr(module).replace("\n", "\n  ")
            lines.append(f"  ({name}): {child}")
        if self._modules:
            lines.append(")")
        return "\n".join(lines)
