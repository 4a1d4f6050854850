"""Two runs of one graph, compared op by op: the first op where they part, forward and then backward.

    report = ag.diverge(fn, inputs, a={"fused": True}, b={"fused": False})
    print(report)              # a table: the parting op, its scope, the differences, the drift expected there
    report.forward             # the first op whose output parts (a Comparison), None when none does
    report.backward            # the first backward step whose gradients part, in backward's order

What it promises. `fn(*inputs)` runs once as it is, recording its graph (a
scalar that requires grad). A setting is a dict of `fused` (True: the fused
kernels, False: the composed ops; AUTOGRAD_FUSED while the run lasts),
`device`, `dtype` ("float32", "float64") and `threads` (the CPU kernels'
threads), each key optional; None, the graph as recorded; or a function of
the same inputs, a second implementation of the same graph, whose ops are
matched to the recorded ones by their place in forward order. A dict
setting replays the recorded graph op by op, each op applied afresh to the
replayed inputs, with the leaves and the ops' data (ids, targets, masks)
moved to the device and the floats cast to the dtype; so a model built inside
fn (a module's demo_loss) runs under any setting without knowing of it.

Each run's backward goes from ∂L/∂L = 1 through every op. Forward, op k's
output is compared between the runs; backward, the gradients op k's VJP
hands its inputs, in the order backward runs them. What counts as parting
is not a fixed epsilon: the same graph is replayed in float64 (composed, on
the CPU) and in float32 (composed, on the CPU), and the float32 run's
distance from the float64 one at each op is how far float32 arithmetic alone
drifts there, the error already carried in from the ops before it included.
Two runs part at an op when they differ by more than DRIFT_FACTOR times that
drift, scaled to the coarsest dtype either run has computed in up to that
op, in the order the ops are compared (float64's rounding is 2⁻²⁹ of
float32's; a second implementation in float32 is float32 there, and so is a
float32 model's loss cast to float64, which carries float32's error on), and
never below one rounding of the op's largest value.
The first such op in forward order is where the runs start to disagree;
after it everything downstream differs too. Backward is compared in its own
order, which finds a VJP that is wrong though its forward is right; a
backward that runs on forward values that already parted parts at once, and
the report says so.

`reference` maps module names (the scopes nn gives: "transformer.h.0") to
arrays captured elsewhere, transformers' forward hooks for example: the
output of each module's last op in setting `a`'s run is compared with its
array, under the same float32 drift. References hold forward values alone.

Everything is deterministic: each run is a fixed sequence of array calls.
Random ops (dropout) are refused, as they part two runs by design.
"""
import contextlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from . import backend, kernels, switches
from .tensor import Tensor, backward_steps, name_scope, topological_order
from .value import Value
from . import ops as _ops

DRIFT_FACTOR = 8  # two float32 runs with other summation orders stay within a few drifts of each other
SETTING_KEYS = ("fused", "device", "dtype", "threads")
SHOWN_BEFORE = 4  # agreeing ops the table lists before the one that parts
WHO = "diverge"


@dataclass(frozen=True)
class Setting:
    """How one run is made: the switches it runs under, or `fn`, a second implementation run as it is."""

    fused: bool = None
    device: str = None
    dtype: np.dtype = None
    threads: int = None
    fn: object = None
    text: str = ""

    def describe(self):
        if self.text:
            return self.text
        if self.fn is not None:
            return f"function {getattr(self.fn, '__name__', 'fn')}"
        words = [("fused" if self.fused else "composed") if self.fused is not None else "",
                 self.device or "", str(self.dtype) if self.dtype is not None else "",
                 f"threads={self.threads}" if self.threads is not None else ""]
        return ", ".join(w for w in words if w) or "as recorded"


def setting(value, which="a"):
    """A Setting from what diverge was given for `which` ("a" or "b"): a dict, a function or None."""
    if value is None or isinstance(value, Setting):
        return value or Setting()
    if callable(value):
        return Setting(fn=value)
    if not isinstance(value, dict):
        raise TypeError(f"{WHO}: setting {which} must be a dict of {', '.join(SETTING_KEYS)}, a function of the "
                        f"same inputs, or None; got {type(value).__name__}")
    unknown = sorted(set(value) - set(SETTING_KEYS))
    if unknown:
        raise TypeError(f"{WHO}: setting {which} has unknown key(s) {', '.join(map(repr, unknown))}; "
                        f"the keys are {', '.join(SETTING_KEYS)}")
    dtype = value.get("dtype")
    if dtype is not None:
        try:
            dtype = np.dtype(dtype)
        except TypeError:  # numpy's "data type 'floaty' not understood" names neither diverge nor the setting
            raise TypeError(f"{WHO}: setting {which}'s dtype must be float32 or float64, got {dtype!r}") from None
        if dtype not in (np.float32, np.float64):
            raise TypeError(f"{WHO}: setting {which}'s dtype must be float32 or float64, got {dtype}")
    device = value.get("device")
    if device is not None:
        backend.xp_for(backend.check_device(device))  # a clear error naming CuPy where "cuda" cannot run
    threads = value.get("threads")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"{WHO}: setting {which}'s threads must be a positive int, got {threads!r}")
    fused = value.get("fused")
    if fused is not None and not isinstance(fused, bool):
        raise TypeError(f"{WHO}: setting {which}'s fused must be True or False, got {fused!r}")
    return Setting(fused, device, dtype, threads)


TRUTH = Setting(fused=False, device="cpu", dtype=np.dtype(np.float64), text="float64, composed, cpu")
FLOAT32 = Setting(fused=False, device="cpu", dtype=np.dtype(np.float32), text="float32, composed, cpu")


@dataclass
class Comparison:
    """One op in one phase: where it stands, what it is, and how far the two runs are apart there."""

    phase: str  # "forward" or "backward"
    step: int  # its place in this phase's order, from 1
    index: int  # its place in forward order, from 1 (the same op's number in both phases)
    op: str
    scope: str
    output: str  # the recorded output tensor's name, or its shape for an unnamed one
    abs: float = 0.0  # max |a − b| over the compared arrays
    rel: float = 0.0  # that over the largest |value| the float64 run has there
    drift: float = 0.0  # how far float32 alone drifts from float64 there, scaled to the runs' coarsest dtype so far
    parts: bool = False
    note: str = ""  # why the op could not be compared (the graphs differ there)

    @property
    def ratio(self):
        """How many expected drifts apart the runs are (DRIFT_FACTOR or more parts)."""
        return self.abs / self.drift if self.drift else (math.inf if self.abs else 0.0)


@dataclass
class DivergeReport:
    """ag.diverge's answer; `str(report)` is its table.

    a, b        the settings, in words ("fused", "float64, composed, cpu", "reference arrays").
    forward     the first op whose output parts, in forward order (a Comparison), or None.
    backward    the first backward step whose gradients part, in backward's order, or None.
    rows        {"forward": [...], "backward": [...]}: every Comparison, in each phase's order.
    first_difference   {"forward": ..., "backward": ...}: the first op whose values differ at all (even within
                their drift), or None where the runs agree to the bit.
    root, ops   the recorded graph's loss and its ops in forward order (ops[index − 1]), for drawing.
    """

    a: str
    b: str
    rows: dict
    root: object
    ops: list
    forward: Comparison = None
    backward: Comparison = None
    first_difference: dict = field(default_factory=dict)

    def parting_ops(self):
        """The recorded ops where the runs part, forward's then backward's (one op may be both)."""
        return [self.ops[c.index - 1] for c in (self.forward, self.backward) if c is not None and not c.note]

    def __str__(self):
        return format_report(self)


def _context_fused(fused):
    if fused is None:
        return contextlib.nullcontext()
    return _environment("AUTOGRAD_FUSED", "1" if fused else "0")


@contextlib.contextmanager
def _environment(name, value):
    previous = switches.read(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


@contextlib.contextmanager
def _threads(n):
    """The CPU kernels on `n` threads while the run lasts, then as they were."""
    if n is None:
        yield
        return
    previous = kernels._cpu["threads"]  # the count given, None for the kernels' own default
    kernels.share_cpu_threads(n)
    try:
        yield
    finally:
        kernels.share_cpu_threads(previous)


def _converted(value, s):
    """An op's data under setting `s`: arrays moved to its device, floats cast to its dtype; tuples (an
    indexing key) item by item; anything else (axes, flags, a dtype) as it is."""
    if isinstance(value, tuple):
        return tuple(_converted(v, s) for v in value)
    if backend.device_of(value) is None:
        return value
    if s.device is not None:
        value = backend.to_device(value, s.device)
    if s.dtype is not None and value.dtype.kind == "f" and value.dtype != s.dtype:
        value = value.astype(s.dtype)
    return value


def _forward_ops(root):
    """The tensors ops made, in an order forward could run them (every input before its result)."""
    made = [t for t in reversed(topological_order(root)) if t.op is not None]
    for t in made:
        op = t.op
        if isinstance(op, _ops.Dropout) or (isinstance(op, _ops.ScaledDotProductAttention)
                                            and op.params.get("dropout_p")):
            raise ValueError(f"{WHO}: {op.name}{' in ' + op.scope if op.scope else ''} draws random masks, so two "
                             "runs part there by design; compare the model in eval mode (dropout 0)")
        if isinstance(op, _ops.Checkpoint):
            raise ValueError(f"{WHO}: the graph holds a Checkpoint, whose fn reads parameters a replay cannot move "
                             "or cast; compare the model without activation checkpointing")
    return made


def _host(array):
    return backend.to_host(array).astype(np.float64, copy=True)


def _replay(made, root, s, visit):
    """Run the recorded graph again under setting `s`, op by op, calling visit(phase, k, arrays) with op k's
    output (forward) and the gradients its VJP hands its inputs (backward, in backward's order)."""
    fresh = {}

    def tensor(t):
        if id(t) not in fresh:  # a leaf, or a constant: its data under the setting
            fresh[id(t)] = Tensor(_converted(t.data, s), requires_grad=t.requires_grad)
        return fresh[id(t)]

    with _context_fused(s.fused), _threads(s.threads):
        for k, t in enumerate(made):
            op = t.op
            inputs = [tensor(x) for x in op.inputs]
            params = {name: _converted(v, s) for name, v in op.params.items()}
            with name_scope(op.scope) if op.scope else contextlib.nullcontext():
                fresh[id(t)] = type(op).apply(*inputs, **params)
            visit("forward", k, [fresh[id(t)].data])
        _backward(fresh[id(root)], {id(fresh[id(t)]): k for k, t in enumerate(made)}, visit)


def _backward(root, index, visit):
    grad = backend.xp_for(root.device).ones_like(root.data)
    for t, _, sent in backward_steps(root, grad, free=False):
        if t.op is not None:
            visit("backward", index[id(t)], [pg for _, pg, _ in sent if pg is not None])


def _run_function(fn, inputs, made, visit):
    """A second implementation, run as it is: its ops matched to the recorded ones by place in forward order.
    Returns the first place where its graph differs from the recorded one, (k, why), or None."""
    root = fn(*inputs)
    if not isinstance(root, Tensor) or not root.requires_grad:
        raise TypeError(f"{WHO}: the function setting must return a Tensor that requires grad, as fn does")
    own = _forward_ops(root)
    for k, (t, mine) in enumerate(zip(made, own)):
        if type(t.op) is not type(mine.op) or t.shape != mine.shape:
            return k, (f"the graphs differ here: one runs {t.op.name} {t.shape}, "
                       f"the other {mine.op.name} {mine.shape}")
        visit("forward", k, [mine.data])
    if len(own) != len(made):
        return min(len(own), len(made)), f"the graphs differ in length: {len(made)} ops against {len(own)}"
    _backward(root, {id(t): k for k, t in enumerate(own)}, visit)
    return None


def _rounding(dtype):
    return float(np.finfo(dtype).eps)


def _coarsest_rounding(arrays):
    """The largest rounding among the float arrays one run has at an op (float64's where it has none)."""
    return max([_rounding(a.dtype) for a in arrays if a.dtype.kind == "f"], default=_rounding(np.float64))


class _Stored:
    """Each op's arrays in one run, as float64 host copies: {(phase, k): [arrays]}, and the rounding of the
    dtypes they had: {(phase, k): eps}."""

    def __init__(self):
        self.arrays, self.rounding = {}, {}

    def __call__(self, phase, k, arrays):
        self.arrays[(phase, k)] = [_host(a) for a in arrays]
        self.rounding[(phase, k)] = _coarsest_rounding(arrays)


def _largest_difference(ours, theirs):
    """max |ours − theirs| over matching lists of arrays (inf where a value is not finite in one only)."""
    worst = 0.0
    for x, y in zip(ours, theirs):
        with np.errstate(invalid="ignore"):
            d = np.abs(x - y)
        same_nonfinite = (x == y) | (np.isnan(x) & np.isnan(y))
        d = np.where(same_nonfinite, 0.0, np.where(np.isnan(d), np.inf, d))
        worst = max(worst, float(d.max()) if d.size else 0.0)
    return worst


class _Against:
    """A run compared with a stored one as it goes: {(phase, k): max difference}, and {(phase, k): the coarser
    rounding of the two runs' dtypes there}."""

    def __init__(self, stored):
        self.stored, self.difference, self.rounding = stored, {}, {}

    def __call__(self, phase, k, arrays):
        key = (phase, k)
        if key in self.stored.arrays:  # not where the stored run's graph had already left the recorded one
            self.difference[key] = _largest_difference([_host(a) for a in arrays], self.stored.arrays[key])
            self.rounding[key] = max(_coarsest_rounding(arrays), self.stored.rounding[key])


def diverge(fn, inputs=(), a=None, b=None, reference=None):
    """Run fn(*inputs) and its backward under settings `a` and `b` (or `a` against `reference` arrays) and
    report the first op, forward then backward, where the runs part beyond the drift a float64 run of the same
    graph predicts (see the module's docstring). Returns a DivergeReport; print it for the table. `inputs` is the
    Tensor fn takes, or a sequence of fn's arguments."""
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)  # list() would split one tensor into its rows
    sa, sb = setting(a, "a"), setting(b, "b")
    if reference is not None and b is not None:
        raise TypeError(f"{WHO}: give setting b or reference arrays, not both (the references stand for run b)")
    if reference is not None and not isinstance(reference, Mapping):
        raise TypeError(f"{WHO}: reference must map module names to their output arrays, "
                        f"{{'transformer.h.0': array, ...}}; got {type(reference).__name__}")
    if reference is not None and not reference:  # else the report would say "not compared" as if all were well
        raise ValueError(f"{WHO}: the reference holds no arrays; give {{module name: its output array}}, "
                         "e.g. {'transformer.h.0': ...}")
    if reference is not None:
        _check_reference_dtypes(reference)
    root = fn(*inputs)
    if isinstance(root, Value):
        raise TypeError(f"{WHO}: only Tensor graphs can be compared (ops with fused and composed forms, float32 "
                        "and float64); fn returned a chapter-one Value: build the loss from Tensors")
    if not isinstance(root, Tensor) or not root.requires_grad or root.size != 1:
        raise TypeError(f"{WHO}: fn must return a scalar Tensor that requires grad (a loss), got "
                        f"{root!r:.120}; reduce it first (e.g. .sum())")
    made = _forward_ops(root)
    if reference is not None:  # refused here, before the replays: they are the work
        _check_reference_modules(made, reference)
    truth = _Stored()
    _replay(made, root, TRUTH, truth)
    drift32 = _Against(truth)
    _replay(made, root, FLOAT32, drift32)
    scale = {key: max((float(np.abs(x).max()) if x.size else 0.0) for x in arrays) if arrays else 0.0
             for key, arrays in truth.arrays.items()}
    run_a = _Stored()
    broken = _run(sa, fn, inputs, made, root, run_a)
    if reference is not None:
        if broken is not None:  # the references are matched to the recorded graph's modules, op by op
            raise ValueError(f"{WHO}: setting a's function leaves the recorded graph at op #{broken[0] + 1} "
                             f"({broken[1]}), so its modules' outputs cannot be matched with the references; "
                             "compare the references with a run of fn's own graph (a dict setting, or None)")
        return _against_reference(made, root, sa, run_a, reference, drift32.difference, scale)
    against = _Against(run_a)
    broken_b = _run(sb, fn, inputs, made, root, against)
    if broken is None or (broken_b is not None and broken_b[0] < broken[0]):
        broken = broken_b  # the earlier place where a second implementation's graph leaves the recorded one
    rows = {phase: [] for phase in ("forward", "backward")}
    # a second implementation whose graph leaves the recorded one is compared up to that op, and not backward
    order = {"forward": list(range(len(made) if broken is None else broken[0])),
             "backward": [k for phase, k in truth.arrays if phase == "backward"] if broken is None else []}
    coarse = 0.0
    for phase, ks in order.items():
        for step, k in enumerate(ks, 1):
            key = (phase, k)
            coarse = max(coarse, against.rounding[key])  # a float64 op carries on the error a float32 op made
            drift = max(drift32.difference[key] * coarse / _rounding(np.float32), coarse * scale[key])
            d = against.difference[key]
            rows[phase].append(_comparison(phase, step, k, made, d, d / scale[key] if scale[key] else 0.0, drift,
                                           d > DRIFT_FACTOR * drift))
    if broken is not None:  # after the ops compared before it, so that one of them that parts comes first
        rows["forward"].append(_comparison("forward", broken[0] + 1, broken[0], made, note=broken[1]))
    return _report(sa.describe(), sb.describe(), rows, root, made)


def _run(s, fn, inputs, made, root, visit):
    """Run setting `s` into `visit`; for a function setting, the place its graph leaves the recorded one."""
    if s.fn is not None:
        return _run_function(s.fn, inputs, made, visit)
    _replay(made, root, s, visit)
    return None


def _label(t):
    """The output's name, or its shape for an unnamed one."""
    return t.name or "(" + ", ".join(map(str, t.shape)) + ("," if t.ndim == 1 else "") + ")"


def _comparison(phase, step, k, made, d=0.0, rel=0.0, drift=0.0, parts=False, note=""):
    t = made[k]
    return Comparison(phase, step, k + 1, t.op.name, t.op.scope, _label(t), d, rel, drift, parts or bool(note),
                      note)


def _report(a, b, rows, root, made):
    report = DivergeReport(a, b, rows, root, [t.op for t in made])
    for phase, comparisons in rows.items():
        setattr(report, phase, next((c for c in comparisons if c.parts), None))
        report.first_difference[phase] = next((c for c in comparisons if c.abs or c.note), None)
    return report


def _module_outputs(made):
    """module name -> the index of the last op recorded inside it (or inside a module within it)."""
    last = {}
    for k, t in enumerate(made):
        parts = t.op.scope.split(".") if t.op.scope else []
        for n in range(1, len(parts) + 1):
            last[".".join(parts[:n])] = k
    return last


def _check_reference_dtypes(reference):
    """Each reference holds numbers: a module's output cannot be text or Python objects."""
    for name, array in reference.items():
        dtype = array.dtype if backend.device_of(array) else np.asarray(array).dtype  # a torch tensor's too
        if dtype.kind not in "biuf":
            raise TypeError(f"{WHO}: the reference for {name!r} holds {dtype} values; give the module's output, "
                            "an array of numbers")


def _check_reference_modules(made, reference):
    """Each reference names a module of the recorded graph and has the shape of that module's output."""
    outputs = _module_outputs(made)
    missing = sorted(set(reference) - set(outputs))
    if missing:
        known = (f"the modules it has include {', '.join(sorted(outputs, key=outputs.get)[:12])}" if outputs else
                 "it has no modules (no op ran inside an nn.Module or ag.name_scope), so there is nothing to match")
        raise KeyError(f"{WHO}: no module named {', '.join(map(repr, missing))} recorded ops in fn's graph; {known}")
    for name, array in reference.items():
        theirs = tuple(array.shape) if hasattr(array, "shape") else np.asarray(array).shape  # a CuPy array stays put
        ours = tuple(made[outputs[name]].shape)
        if theirs != ours:
            raise ValueError(f"{WHO}: the reference for {name!r} has shape {theirs}, the module's output {ours}; "
                             "capture the module's output tensor itself (a forward hook's output, its first item "
                             "where it returns a tuple)")


def _against_reference(made, root, sa, run_a, reference, drift32, scale):
    """Setting a's module outputs against arrays captured elsewhere (assumed float32, another library's)."""
    outputs = _module_outputs(made)
    rows = {"forward": [], "backward": []}
    for step, (name, k) in enumerate(sorted(((n, outputs[n]) for n in reference), key=lambda nk: nk[1]), 1):
        ours = run_a.arrays[("forward", k)][0]
        theirs = np.asarray(backend.to_host(reference[name]) if backend.device_of(reference[name]) else
                            reference[name], dtype=np.float64)
        key = ("forward", k)
        d = _largest_difference([ours], [theirs])
        coarse = max(_rounding(np.float32), *(run_a.rounding[("forward", j)] for j in range(k + 1)))
        drift = max(drift32[key] * coarse / _rounding(np.float32), coarse * scale[key])
        c = _comparison("forward", step, k, made, d, d / scale[key] if scale[key] else 0.0, drift,
                        d > DRIFT_FACTOR * drift)
        # the module compared, not the scope of its last op (a block's MLP ends in its c_proj's Linear)
        c.scope, c.output = name, f"{name}'s output"
        rows["forward"].append(c)
    return _report(sa.describe(), "reference arrays", rows, root, made)


def _number(x):
    return "0" if x == 0 else f"{x:.3g}"


def summary(report, phase):
    """What the report says of `phase`: (lines of text, the comparisons its table shows): the parting op and
    the agreeing ops just before it; where none parts, the op closest to parting; none where all agree to the bit."""
    comparisons = report.rows[phase]
    parting = getattr(report, phase)
    what = "values" if phase == "forward" else "gradients"
    if not comparisons:
        broken = next((c for c in report.rows["forward"] if c.note), None)
        why = ("no op" if phase == "forward" else
               f"the graphs differ at #{broken.index}, so backward's steps cannot be matched" if broken else
               "references hold forward values only")
        return [f"{phase}: not compared ({why})"], []
    if parting is None:
        first = report.first_difference[phase]
        if first is None:
            return [f"{phase}: no op parts; the runs agree to the bit at all {len(comparisons)} ops"], []
        worst = max(comparisons, key=lambda c: c.ratio)
        return [f"{phase}: no op parts; the first op whose {what} differ at all is #{first.index} {first.op}, "
                f"within its drift; the closest to parting is #{worst.index} {worst.op} "
                f"({worst.ratio:.2g} × its expected drift, parting at {DRIFT_FACTOR})"], [worst]
    where = f" in {parting.scope}" if parting.scope else ""
    if parting.note:
        head = f"{phase}: the runs part at #{parting.index} {parting.op}{where}: {parting.note}"
    else:
        by = (f"{_number(parting.abs)}, {parting.ratio:.3g} × the drift float32 alone has there"
              if math.isfinite(parting.abs) else  # _largest_difference's mark of a value not finite in one run
              "inf: nan or ±inf in one run, where the other has another value")
        head = (f"{phase}: the runs part first at #{parting.index} {parting.op}{where} (step {parting.step} of "
                f"{len(comparisons)} {'in forward order' if phase == 'forward' else 'as backward runs them'}): its "
                f"{'output differs' if phase == 'forward' else 'gradients for its inputs differ'} by {by}")
    before = [c for c in comparisons if c.step < parting.step]
    lines = [head]
    if phase == "backward" and report.forward is not None and not report.forward.note:
        lines.append(f"  (backward runs on forward values that already parted at #{report.forward.index})")
    shown = before[-SHOWN_BEFORE:]
    if len(before) > len(shown):
        lines.append(f"  the {len(before)} ops before it agree; the last {len(shown)}:")
    elif len(before) > 1:
        lines.append(f"  the {len(before)} ops before it agree:")
    elif before:
        lines.append("  the op before it agrees:")
    return lines, shown + [parting]


COLUMNS = ("#", "op", "module", "output", "max |a−b|", "max rel", "expected drift", "")


def cells(c):
    """A comparison as the table's cells, in COLUMNS' order."""
    return (str(c.index), c.op, c.scope or "—", c.output, _number(c.abs), _number(c.rel), _number(c.drift),
            "PARTS" if c.parts else "agrees")


def _table(comparisons):
    rows = [cells(c) for c in comparisons]
    widths = [max(len(r[i]) for r in rows + [COLUMNS]) for i in range(len(COLUMNS))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [COLUMNS] + rows]


def heading(report):
    return [f"{WHO}: run a = {report.a}, run b = {report.b}",
            f"  two runs part at an op when they differ by more than {DRIFT_FACTOR} × the drift a float32 run "
            "shows there from a float64 run of the same graph"]


def format_report(report):
    lines = heading(report)
    for phase in ("forward", "backward"):
        text, shown = summary(report, phase)
        lines += [""] + text + (_table(shown) if shown else [])
    return "\n".join(lines)
