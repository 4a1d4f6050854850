"""Anomaly mode: stop at the first op whose forward output or VJP holds NaN or inf, and say where.

    with ag.detect_anomaly():            # or @ag.detect_anomaly() on a function
        loss = model(x, y)[1]
        loss.backward()

The error, `AnomalyError` (a FloatingPointError), names forward or backward,
the op's class and rule, the module that recorded it (its `name_scope`), the
forward call that applied it (the line of code outside autograd: for a
backward anomaly the traceback shows only the call of backward()), each
input's shape and summary (min, max, how many NaN and inf) and which input or
output went non-finite first: an op whose inputs are all finite made the bad
value itself; an input that was already non-finite came from outside the
checked ops (a leaf: a parameter the optimizer wrote, or the data).

It checks the ops of the thread that entered it, as no_grad() stops only its
own thread's recording (PyTorch's anomaly mode is the whole process's): a
thread sampling beside a training run under --detect-anomaly is neither
slowed by the scans nor stopped by an error naming the training iteration.

Off, it costs the engine one test per op and per VJP
(`autograd.tensor._mode.anomaly is not None`) and nothing else. On, every op's
output, every VJP's gradients and every sum of gradients (for a tensor that
several ops use, in a `.grad` that adds up over backward() calls, and over the
axes broadcasting stretched, as a bias's over the batch: finite parts can
overflow; so can a gradient cast to its input's float16) are scanned once
(`isfinite`).

A backward step is one op of that pass, as viz.trace numbers it. A
checkpoint's backward runs a pass of its recompute inside the outer pass: an
anomaly inside the checkpointed function is reported at its step of that
inner pass (whose root is the function's output), one outside it at its step
of the outer pass. Under create_graph a VJP recorded as ops is checked as the
VJP it is, not as the forward of the ops it is written with.

Two things a caller may add, since autograd knows nothing above it:
`where` (text the message carries, or a function giving it, e.g. models.train's
"training iteration 37") and `pictures`, a function called with the `Anomaly` before the error is
raised, returning {what: path} of files it wrote (viz.anomaly.pictures draws
the graph around the culprit and a trace page opening at its step); with
`pictures`, backward keeps the graph until it is dropped, so the trace can
walk the whole pass.
"""
import contextlib
import linecache
import os
import sys
import threading
from dataclasses import dataclass, field

import numpy as np

from . import backend
from . import tensor as _tensor
from .tensor import array_of

WHO = "detect_anomaly"
_ENGINE = __name__.partition(".")[0]  # the package whose frames a forward call's line skips: "autograd"


class AnomalyError(FloatingPointError):
    """NaN or inf at an op; `.anomaly` holds the op, its output and what the message says."""

    def __init__(self, message, anomaly):
        super().__init__(message)
        self.anomaly = anomaly


@dataclass
class Anomaly:
    """Where the first non-finite value appeared.

    phase       "forward" or "backward".
    op          the Function (its class, `rule`, `input_names`); None for a sum into a .grad, which no op makes.
    scope       the module that recorded it ("" outside any).
    output      forward: the op's result; backward: the tensor whose op's VJP ran.
    culprit     which value first went non-finite: "output", or an input's or a gradient's name.
    step        backward: the op's place in the backward pass (1 = the op that made the root), as viz.trace numbers it.
    root, root_grad   backward: where the pass started, and its gradient.
    grad        backward: the gradient that came into the op.
    sent        backward: what the op's step sent each of its inputs (None where nothing, or not yet computed).
    where       the caller's note (models.train: the training iteration).
    files       {what: path} the pictures hook wrote.
    """

    phase: str
    op: object
    scope: str
    output: object
    culprit: str
    step: int = None
    root: object = None
    root_grad: object = None
    grad: object = None
    sent: tuple = ()
    where: str = ""
    files: dict = field(default_factory=dict)


def summary(array):
    """'shape (2, 3) float32, min -1, max inf, 0 NaN, 1 inf' (min and max leave NaN out)."""
    a = backend.to_host(array)
    head = f"shape {tuple(a.shape)} {a.dtype}"
    if a.size == 0:
        return head + ", empty"
    if a.dtype.kind != "f":
        return f"{head}, min {a.min()}, max {a.max()}"
    nan = int(np.isnan(a).sum())
    inf = int(np.isinf(a).sum())
    if nan == a.size:
        return f"{head}, all {nan:,} NaN"
    return f"{head}, min {np.nanmin(a):.4g}, max {np.nanmax(a):.4g}, {nan:,} NaN, {inf:,} inf"


def _finite(array):
    return array.dtype.kind != "f" or bool(backend.xp_for(backend.device_of(array) or "cpu").isfinite(array).all())


def _called(t):
    """How a report names a tensor: its name, else the op that made it, else its shape."""
    if t.name:
        return t.name
    if t.op is not None:
        return f"{t.op.name}'s output" + (f" in {t.op.scope}" if t.op.scope else "")
    return f"the leaf of shape {t.shape}"


def _caller():
    """(file, line, function) of the innermost frame outside autograd: the code that applied the op now running."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == _ENGINE:
        frame = frame.f_back
    return None if frame is None else (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def _site_line(site):
    """'models/gpt/gpt2.py:129 in forward: gelu = fc.gelu()' (the path relative to the working folder, if inside)."""
    file, line, function = site
    shown = os.path.relpath(file) if os.path.isabs(file) else file
    if shown.startswith(os.pardir):
        shown = file
    code = linecache.getline(file, line).strip()
    return f"{shown}:{line} in {function}" + (f": {code}" if code else "")


def _marks(parts, total):
    """Report lines for a sum that is NaN/inf: each (what, value) summed, then the sum, the first non-finite marked."""
    bad = next((what for what, v in parts if not _finite(v)), None)
    lines = [f"{what}: {summary(v)}" + ("  ← first non-finite: it came in so" if what == bad else "")
             for what, v in parts]
    mark = "" if bad else f"  ← first non-finite: every part is finite, the sum overflowed {total.dtype}"
    return lines + [f"sum: {summary(total)}{mark}"]


def is_anomaly_enabled():
    """Whether a detect_anomaly is active (as torch.is_anomaly_enabled): code that skips work no op needs, such as
    a module's name scope under no_grad, does it after all, for the report."""
    return _tensor._mode.anomaly is not None


@contextlib.contextmanager
def paused():
    """No op checked inside: detect_anomaly's own drawing, and a gradient that backward computes as ops of the
    graph (create_graph), which it checks as a whole, as it checks an array VJP's."""
    previous, _tensor._mode.anomaly = _tensor._mode.anomaly, None
    try:
        yield
    finally:
        _tensor._mode.anomaly = previous


def _origin(t):
    """What a non-finite input is, for the line that says where it came from."""
    if getattr(t, "why", None):
        return f"the constant {t.why}"
    if t.op is not None:
        return f"made by {t.op.name}" + (f" in {t.op.scope}" if t.op.scope else "") + " outside detect_anomaly"
    if t.name:
        return f"the leaf {t.name} (a parameter: the optimizer's last update or its initialisation made it so)"
    return "a leaf (the data, or a tensor made outside any op)"


class detect_anomaly(_tensor.ModeDecorator):
    """Raise AnomalyError at the first NaN or inf an op makes, forward or backward (see the module's docstring).

    pictures: None, or f(Anomaly) -> {what: path}, called before the error is raised
        (e.g. viz.anomaly.pictures("out")); its paths go into the message.
    where: a note for the message, or a function returning one when an anomaly is found
        (models.train: lambda: f"training iteration {run.iter}").
    """

    def __init__(self, func=None, *, pictures=None, where=""):  # func: ModeDecorator.__new__'s (used bare)
        if pictures is not None and not callable(pictures):
            raise TypeError(f"{WHO}: pictures must be a function of the Anomaly returning {{what: path}}, "
                            f"got {type(pictures).__name__}; e.g. viz.anomaly.pictures('out')")
        self.pictures, self.where = pictures, where
        self._previous = threading.local()  # a stack per thread: a decorated function may call itself, in any
        # thread, and checks only its own thread's ops (as no_grad)

    def __enter__(self):
        self._previous.__dict__.setdefault("modes", []).append(_tensor._mode.anomaly)
        _tensor._mode.anomaly = self
        return self

    def __exit__(self, *exc):
        _tensor._mode.anomaly = self._previous.modes.pop()

    # ---- called by the engine (autograd/tensor.py), only while this is active ----

    def check_forward(self, op, inputs, result):
        op.site = _caller()
        if _finite(result.data):
            return
        names = op.input_labels(len(inputs))
        bad = [name for name, t in zip(names, inputs) if not _finite(t.data)]
        scope = op.scope or (_tensor._mode.scopes[-1] if _tensor._mode.scopes else "")
        anomaly = Anomaly("forward", op, scope, result, bad[0] if bad else "output", where=self._where())
        lines = [f"output: {summary(result.data)}" + ("  ← first non-finite: every input is finite" if not bad else "")]
        for name, t in zip(names, inputs):
            mark = ""
            if bad and name == bad[0]:
                mark = f"  ← first non-finite: it came in so, {_origin(t)}"
            lines.append(f"input {name}: {summary(t.data)}{mark}")
        what = "made NaN/inf" if not bad else f"received NaN/inf in its input {bad[0]}"
        self._raise(anomaly, f"forward of {op.name} {what}", lines)

    def begin_backward(self, root, grad, free):
        """A backward pass starts: check its gradient. Returns the pass's checks (`_Pass`) and whether to free the
        graph as it goes (not for pictures)."""
        if not _finite(grad):
            name = f"{root.op.name}'s output" if root.op is not None else "the root"
            anomaly = Anomaly("backward", root.op, root.op.scope if root.op else "", root, "the starting gradient",
                              root=root, root_grad=grad, grad=grad, where=self._where())
            self._raise(anomaly, f"backward from {name} starts from a non-finite gradient",
                        [f"grad: {summary(grad)}"])
        return _Pass(self, root, grad), free and self.pictures is None

    def add_to_grad(self, t, g):
        """t.grad + g, the gradient a backward() adds into what earlier ones left in t.grad, checked before t keeps
        it: two finite parts can overflow. Added unchecked: under create_graph the sum is an op of the graph."""
        with paused():
            total = t.grad + g
        if not _finite(array_of(total)):
            anomaly = Anomaly("backward", None, "", t, "its .grad", grad=array_of(g), where=self._where())
            lines = _marks([(".grad before", array_of(t.grad)), ("this backward's gradient", array_of(g))],
                           array_of(total))
            self._raise(anomaly, f"backward() added the gradient for {_called(t)} into its .grad and got NaN/inf "
                                 "(.grad sums every backward() until it is cleared: opt.zero_grad())", lines)
        return total

    def _where(self):
        return self.where() if callable(self.where) else self.where

    def _raise(self, anomaly, headline, lines):
        op = anomaly.op
        head = [f"{WHO}: {headline}" + (f" at {anomaly.where}" if anomaly.where else "")]
        if op is not None:
            head.append(f"op: {op.name}, rule {op.rule or '(none declared)'}")
            scope = anomaly.scope or "(none: the top module's own forward, or outside any module)"
            head.append(f"module: {scope}")
            if op.site is not None:
                head.append(f"forward call: {_site_line(op.site)}")
        if self.pictures is not None and op is not None:  # a picture is of the graph around an op
            anomaly.files = self._draw(anomaly)
        tail = [f"{what}: {path}" for what, path in anomaly.files.items()]
        raise AnomalyError("\n  ".join(head + lines + tail), anomaly) from None

    def _draw(self, anomaly):
        """The caller's pictures, drawn with the check off (drawing may run ops, and a trace reruns backward)."""
        try:
            with paused(), np.errstate(all="ignore"):
                return dict(self.pictures(anomaly))
        except Exception as exc:  # a picture that fails must not hide the anomaly it was drawing
            return {"pictures": f"not written ({type(exc).__name__}: {exc})"}


class _Pass:
    """One backward pass under check: where it started, for the report and the trace page, and how many ops'
    gradients each tensor's sum holds. Each pass has its own: a checkpoint's backward runs a pass of its recompute
    inside the outer one, whose reports must still name the outer root and count the outer steps."""

    def __init__(self, detector, root, grad):
        self.detector, self.root, self.root_grad = detector, root, grad
        self.parts = {}  # id(tensor): how many ops' gradients its sum holds, once more than one

    def _raise(self, t, culprit, step, g, headline, lines, sent):
        anomaly = Anomaly("backward", t.op, t.op.scope, t, culprit, step=step, root=self.root,
                          root_grad=self.root_grad, grad=g, sent=sent, where=self.detector._where())
        self.detector._raise(anomaly, headline, lines)

    def check(self, t, g, input_grads, step):
        """The VJP of t's op, step `step` of this pass, gave `input_grads` for the incoming gradient `g`."""
        if all(pg is None or _finite(pg) for pg in input_grads):
            return
        op = t.op
        names = op.input_labels(len(op.inputs))
        bad = next(name for name, pg in zip(names, input_grads) if pg is not None and not _finite(pg))
        g_finite = _finite(g)
        lines = [f"incoming gradient g: {summary(g)}"
                 + ("" if g_finite else "  ← first non-finite: the ops before it summed to NaN/inf")]
        for name, x, pg in zip(names, op.inputs, input_grads):
            lines.append(f"input {name}: {summary(x.data)}")
            if pg is not None:
                mark = "  ← first non-finite" + (": g and the inputs are finite" if g_finite else "") if name == bad else ""
                lines.append(f"  gradient for {name}: {summary(pg)}{mark}")
        self._raise(t, f"the gradient for {bad}", step, g, f"backward of {op.name} (step {step} of backward) "
                                                           f"returned NaN/inf as the gradient for {bad}", lines,
                    tuple(input_grads))

    def fitted(self, x, vjp, t, g, step):
        """tensor._fit(vjp, x, op, t): the gradient `vjp` that t's op (step `step`) returned for its input x, summed
        over the axes broadcasting stretched and cast to x's dtype (the engine's work, not the op's), checked: a bias's
        gradient summed over a batch, or a float32 gradient cast to float16, can overflow though every part is
        finite. Fitted unchecked: under create_graph the sum is an op of the graph, checked as this step's."""
        op = t.op
        with paused():
            pg = _tensor._fit(vjp, x, op, t)
        if _finite(array_of(pg)):
            return pg
        slot = next(name for name, i in zip(op.input_labels(len(op.inputs)), op.inputs) if i is x)
        vjp, pg = array_of(vjp), array_of(pg)
        what = " and ".join(w for w, differs in (("summed over the broadcast axes", vjp.shape != pg.shape),
                                                 (f"cast to {pg.dtype}", vjp.dtype != pg.dtype)) if differs)
        lines = [f"incoming gradient g: {summary(array_of(g))}",
                 f"gradient for {slot} from {op.name}: {summary(vjp)}",
                 f"{what} to fit {slot} ({summary(x.data)}): {summary(pg)}  ← first non-finite: every part is "
                 f"finite, the result overflowed {pg.dtype}"]
        self._raise(t, f"the gradient for {slot}", step, array_of(g),
                    f"backward of {op.name} (step {step} of backward) returned a finite gradient for {slot}, "
                    f"which {what} became NaN/inf", lines, tuple(pg if i is x else None for i in op.inputs))

    def add(self, x, previous, pg, t, g, step):
        """previous + pg: the gradient for x summed so far, plus what t's op (step `step`) sends it, checked, since
        finite parts can overflow. Added unchecked: under create_graph the sum is an op of the graph."""
        with paused():
            total = previous + pg
        n = self.parts[id(x)] = self.parts.get(id(x), 1) + 1
        if _finite(array_of(total)):
            return total
        op = t.op
        slot = next(name for name, i in zip(op.input_labels(len(op.inputs)), op.inputs) if i is x)
        before = f"gradient so far, from {n - 1} op" + ("s" if n > 2 else "")
        lines = _marks([(before, array_of(previous)), (f"gradient for {slot} from {op.name}", array_of(pg))],
                       array_of(total))
        self._raise(t, f"the summed gradient for {_called(x)}", step, array_of(g),
                    f"backward summed the gradients for {_called(x)} from {n} ops to NaN/inf at step {step} of "
                    f"backward, adding {op.name}'s for its input {slot}", lines,
                    tuple(array_of(pg) if i is x else None for i in op.inputs))
