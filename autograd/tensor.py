"""Tensor: an n-d array that remembers how it was computed, and `backward()`.

Tensor is `Value`'s bigger sibling. `.data` and `.grad` are arrays instead of
floats; every op is a `Function` that keeps its forward and its local
derivative side by side (as a vector-Jacobian product, never a Jacobian
matrix); and `backward()` is, as in micrograd, a topological sort and a loop:
each op receives the gradient of its output and *accumulates* into its
inputs'. What the engine does once, so that no op has to:

- sums a gradient back over broadcast axes to its input's shape, and checks
  it fits, naming the op that broke it;
- keeps a leaf's `.grad` as its own buffer and adds into it across calls;
- frees what each op saved for backward as soon as it has run.

With `create_graph=True` the same walk runs each op's VJP on tensors instead
of arrays (autograd/higher.py), so the gradients it returns are tensors with
a graph of their own, which can be differentiated again.
"""
import collections
import contextlib
import functools
import inspect
import itertools
import math
import numbers
import operator
import re
import threading
import types
import warnings
import weakref

import numpy as np

from . import backend
from .intervals import check
from .switches import SwitchError

_default_dtype = np.dtype(np.float32)


class _Mode(threading.local):
    """What ops record and check, each thread's own (grad mode is in PyTorch too): one thread's no_grad(),
    name_scope(), detect_anomaly() or ag.grad must not change what another thread's ops do (a server sampling
    under no_grad() beside a training thread), nor be undone by it where two threads' blocks overlap."""

    def __init__(self):
        self.grad = True  # False inside no_grad(): ops record nothing
        self.scopes = []  # dotted names of the modules whose forward is running, innermost last
        self.anomaly = None  # the active detect_anomaly (autograd/anomaly.py), checking every op; None: no check
        self.grad_only = False  # True while ag.grad walks a graph: it returns the gradients and writes no .grad
        self.reads = None  # while a checkpoint's fn runs unrecorded: the activations of the caller's it reads, by id
        self.vjp = None  # while an op's VJP runs on Tensors (create_graph, higher.vjp_in_graph): the op's name


_mode = _Mode()
_recorded = itertools.count()  # numbers the ops recorded, in order: a checkpoint's recompute tells its own ops by them
_changes = 0  # how many times a tensor's array was changed in place (Tensor.mark_changed); each op notes it
# Each array changed in place (Tensor.mark_changed) while it lives, by id: [a weak reference to it, its _span, the
# _changes count when it was last changed]. A change marked on one tensor changes every tensor sharing that memory
# (a view, detach(), Tensor(t.data)), whose saved arrays backward must then refuse; read only where _changes moved
# since an op's forward. An entry goes as its array does, before its id can be reused: the reference's callback
# notes the id in _dead (it runs wherever the collector does, inside a loop over _marks too, so it only notes),
# and _settle moves it before _marks is next read or written.
_marks = {}
_dead = []
# The span of each changed array since freed → its last change: a view's memory lives on in its base. Past
# _FREED_KEPT spans the oldest go, down to half of it (a graph older than those then misses a change made through a
# dead view).
_freed = {}
_FREED_KEPT = 1 << 16

_SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
FLOAT_KINDS = "f"
DATA_KINDS = "fiub"  # floats, integers (token ids), booleans (masks)
# NumPy's ValueErrors that are about shapes (broadcasting, reshape, axes), as against its other refusals (an integer
# to a negative power): the words every such message of NumPy's and CuPy's holds
_SHAPE_PROBLEM = re.compile("shape|broadcast|dimension|axis|axes|size")


class ShapeError(ValueError):
    """Shapes that do not fit an op; the message names the op, the shapes and the fix."""


def set_default_dtype(dtype):
    """The float dtype of tensors made from Python numbers and lists (float32 to start with), in every thread (as
    torch.set_default_dtype): a setting of the program, not a mode to enter around some ops."""
    global _default_dtype
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise TypeError(f"set_default_dtype: {dtype} is not a floating dtype; use float32 or float64")
    _default_dtype = dtype


def get_default_dtype():
    return _default_dtype


def is_grad_enabled():
    return _mode.grad


class ModeDecorator(contextlib.ContextDecorator):
    """A mode entered with `with` or as a decorator. A decorated generator function runs each of its steps inside
    the mode, as PyTorch's grad modes do: calling it only makes the generator, so wrapping the call alone would
    leave its body to the mode of whoever iterates it, and between its yields the caller keeps its own.

    Without the call (`@no_grad`, `@detect_anomaly`) it decorates as with it, as in PyTorch: a subclass's
    options are keyword-only, and its __init__ takes the function first (None by the time Python calls it)."""

    def __new__(cls, func=None, **options):
        mode = super().__new__(cls)
        if func is None:
            return mode
        mode.__init__()
        return mode(func)

    def __call__(self, func):
        if not inspect.isgeneratorfunction(func):
            return super().__call__(func)

        @functools.wraps(func)
        def steps(*args, **kwargs):
            generator = func(*args, **kwargs)
            try:
                with self:
                    value = next(generator)
                while True:
                    try:
                        sent = yield value
                    except GeneratorExit:
                        with self:
                            generator.close()
                        raise
                    except BaseException as exc:  # thrown in by the caller (gen.throw): into the body, in the mode
                        with self:
                            value = generator.throw(exc)
                    else:
                        with self:
                            value = generator.send(sent)
            except StopIteration as stop:
                return stop.value
        return steps


class _GradMode(ModeDecorator):
    """Grad mode set to `recording` inside, in this thread, and restored on the way out."""

    def __init__(self, func=None):  # func: ModeDecorator.__new__'s
        self._previous = threading.local()  # a stack per thread: a `@no_grad()` instance is re-entered by
        # recursive calls, and by other threads

    def __enter__(self):
        self._previous.__dict__.setdefault("modes", []).append(_mode.grad)
        _mode.grad = self.recording

    def __exit__(self, *exc):
        _mode.grad = self._previous.modes.pop()


class no_grad(_GradMode):
    """Record nothing: inside it ops make plain leaf tensors and save nothing for backward (in this thread)."""

    recording = False


class enable_grad(_GradMode):
    """Record again inside no_grad() (PyTorch's enable_grad): for work that builds a graph whatever the caller's
    mode, such as a backward that recomputes its forward (Checkpoint) or records its own VJPs (create_graph)."""

    recording = True


@contextlib.contextmanager
def name_scope(name):
    """Tag every op recorded inside with `name` (nn.Module passes its dotted path, e.g. 'h.0.attn'), in this thread."""
    _mode.scopes.append(name)
    try:
        yield
    finally:
        _mode.scopes.pop()


# The ops (autograd/ops.py) as Tensor's methods call them, `_ops.Add.apply(self, other)`: each op joins as ops.py
# defines it, so this file imports nothing of the ops (ops.py imports Function from here; autograd imports both).
_ops = types.SimpleNamespace()
# create_graph's steps (autograd/higher.py: root_tensor, vjp_in_graph, arrays), which higher.py puts here as it
# loads, for the same reason: higher.py builds on this file and the ops.
_higher = types.SimpleNamespace()


class Function:
    """One op: `forward` on arrays, `backward` maps the output's gradient to the inputs' (the VJP).

    A subclass states its local Jacobian in its docstring and in `rule`, the
    one-line label `viz` draws, and beside `rule` the names that rule uses:
    `input_names`, one per input tensor in order (optional ones, a bias,
    included; an op taking any number, `forward(self, *xs)`, gives one name
    for them all), and `saved_names`, one per array its forward hands to
    `self.save(...)`, in order (a call with nothing for a slot saves None
    there); a path that saves other arrays (a fused kernel's) sets its own
    `saved_names` on the op it runs in. `forward` returns one array and keeps what backward needs with
    `save`; non-array settings are plain attributes. `backward` returns one floating-point array per
    input, a tuple of them for several (None where `self.needs_grad` says none is wanted, or where none
    flows, as in PyTorch), in the broadcast shape if it likes: the engine sums it back. `last_use` is True
    while backward runs for the last time, the engine dropping the saved
    arrays right after (a backward() without retain_graph): backward may then
    write its result over a saved array instead of allocating one.

    What tools read from a recorded op (`tensor.op`): `name`, `rule`,
    `input_names`, `saved_names`, `scope` (the dotted name of the module that
    recorded it, "" outside any), `site` (under detect_anomaly, where the code
    outside autograd applied it), `inputs` (the input tensors), `params` (the
    keyword arguments it was applied with: targets, ids, masks, settings) and
    `saved` (the arrays kept for backward). A backward() without retain_graph
    sets `inputs`, `params` and `saved` to None once the op has run.

    Under create_graph=True the same `backward` runs on tensors: `g` is a
    Tensor, `self.xp` the namespace of engine ops that spells NumPy's names
    (autograd/higher.py), and `saved` what `saved_in_graph` returns. An op that
    does not define `saved_in_graph` cannot be differentiated twice, and says so.
    """

    rule = ""
    input_names = ("x",)  # the one-input op's x; every other op declares its own
    saved_names = ()
    scope = ""
    site = None  # (file, line, function), set by detect_anomaly
    inputs = None
    params = {}
    saved = ()
    last_use = False
    changes = 0  # the count of in-place changes when the op ran forward: backward refuses what it reads changed since
    runs_user_code = False  # True for an op whose forward calls the user's function (checkpoint): its errors pass as raised
    # An op of one input whose VJP is g added at a few positions of zeros (GetItem) may define backward_into(g, dx):
    # that VJP added into dx, the input's gradient summed so far, in place. Its backward's zero-filled array is then
    # made once per input, not once per pick: q, k and v cut from one projection get one array, not three to add.
    backward_into = None
    # An op that reduces (a softmax's normaliser, layer norm's moments) sets widens_float16: float16 inputs
    # are computed in float32 and its output rounded once, as PyTorch computes them (a float16 row sum passes 65504,
    # or drops its low bits, long before the result does); its VJP runs on g in float32 too. Rounded to float16
    # only where all float inputs are float16 (`widened`). Floats of mixed widths, float16 or not, are all computed
    # in the widest's dtype, and the output is of it, as add's; each gradient comes back in its input's own dtype.
    widens_float16 = False
    widened = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__module__ == "autograd.ops":  # the engine's own ops, by class name, for Tensor's methods
            setattr(_ops, cls.__name__, cls)

    @property
    def name(self):
        return type(self).__name__

    def save(self, *arrays):
        self.saved = arrays

    def input_labels(self, count):
        """A name for each of `count` inputs: the declared ones, numbered (x₁, x₂, …) when one name
        stands for any number of inputs (concat, stack); what viz and detect_anomaly print."""
        names = self.input_names
        if len(names) == 1 and count > 1:
            return [f"{names[0]}{str(i).translate(_SUBSCRIPTS)}" for i in range(1, count + 1)]
        return [names[i] if i < len(names) else f"input[{i}]" for i in range(count)]

    @classmethod
    def apply(cls, *inputs, **params):
        if not inputs:
            raise TypeError(f"{cls.__name__}.apply: no input tensors; pass the tensors to differentiate "
                            f"positionally, {cls.__name__}.apply(x, ...), and settings as keywords")
        device = getattr(inputs[0], "device", None)
        for t in inputs:
            if not isinstance(t, Tensor) or t.device != device:
                _refuse_inputs(cls.__name__, inputs)
        for value in params.values():
            if isinstance(value, Tensor) and value._requires_grad:
                _refuse_tensor_setting(cls.__name__, params)
        op = cls()
        op.xp = backend.xp_for(device)
        if _mode.grad:
            op.needs_grad = tuple(t._requires_grad for t in inputs)
        else:
            op.needs_grad = (False,) * len(inputs)
            if _mode.reads is not None:  # tensors made under no_grad have no op: these are the caller's activations
                _mode.reads.update((id(t), t) for t in inputs if t._op is not None)
        arrays = [t._data for t in inputs]
        floats = [a.dtype for a in arrays if a.dtype.kind in FLOAT_KINDS] if cls.widens_float16 else ()
        if floats and (any(d == "float16" for d in floats) or len(set(floats)) > 1):
            # floats of mixed widths all take the widest's dtype, as add's operands do, and the output is of it
            # (a narrower input's values are exact in it); only an op of float16 alone is computed in float32 and
            # rounded back
            widest = max(floats, key=lambda d: d.itemsize)
            op.widened = widest == "float16"
            dtype = "float32" if op.widened else widest
            arrays = [a.astype(dtype) if a.dtype.kind in FLOAT_KINDS and a.dtype != dtype else a for a in arrays]
        try:
            out = op.forward(*arrays, **params)
        except (ShapeError, SwitchError):
            raise
        except TypeError as exc:  # NumPy refusing to write a float result into an integer array, say
            kinds = [t._data.dtype for t in inputs]
            if cls.runs_user_code or all(k.kind in FLOAT_KINDS for k in kinds):
                raise
            raise TypeError(f"{cls.__name__}: computes in floating point, but got {', '.join(map(str, kinds))} "
                            f"({exc}); convert with .astype('float32') first") from None
        except ValueError as exc:
            if cls.runs_user_code:  # the user's function's own error, as it raised it
                raise
            shapes = ", ".join(str(t.shape) for t in inputs)
            if not _SHAPE_PROBLEM.search(str(exc)):
                kinds = [t._data.dtype for t in inputs]
                fix = ("" if all(k.kind in FLOAT_KINDS for k in kinds)
                       else "; integers compute as integers here: convert with .astype('float32') first")
                raise ValueError(f"{cls.__name__}: {exc} (input shapes {shapes}, dtypes "
                                 f"{', '.join(map(str, kinds))}){fix}") from None
            fix = ("; broadcasting needs each trailing axis equal or 1 (reshape, or index with None to add an "
                   "axis)") if "broadcast" in str(exc) else ""
            raise ShapeError(f"{cls.__name__}: {exc} (input shapes {shapes}){fix}") from None
        out_device = backend.device_of(out)
        if out_device is None:  # NumPy's full reductions return scalars, not 0-d arrays
            if not isinstance(out, np.generic):
                _refuse_output(cls.__name__, out)
            out, out_device = op.xp.asarray(out), device
        if op.widened:
            out = out.astype("float16")
        requires_grad = any(op.needs_grad) and out.dtype.kind in FLOAT_KINDS
        if requires_grad:
            op.inputs, op.params, op.changes, op.number = inputs, params, _changes, next(_recorded)
            if _mode.scopes:
                op.scope = _mode.scopes[-1]
        result = Tensor._make(out, out_device, requires_grad, op if requires_grad else None)
        if _mode.anomaly is not None:
            _mode.anomaly.check_forward(op, inputs, result)
        return result

    def forward(self, *arrays, **params):
        raise NotImplementedError(f"{self.name} must define forward(self, *arrays), returning an array")

    def backward(self, grad):
        raise NotImplementedError(f"{self.name} must define backward(self, g), returning one gradient per input")

    def saved_in_graph(self, inputs, out):
        """What `backward` reads from `saved`, slot for slot, as tensors of the graph, for a backward under
        create_graph=True: the input tensors, the output `out`, values rebuilt from them by engine ops; arrays
        that are constants of the rule (masks, ids, tie counts) stay arrays. Called on a copy of the op whose
        `xp` is already the engine's namespace; a fused op switches its copy to its composed rule here."""
        raise RuntimeError(
            f"{self.name}: its VJP computes on arrays only, so a gradient through it cannot be differentiated "
            f"again (create_graph=True); define {self.name}.saved_in_graph to say which tensors of the graph "
            "its backward reads, and compute that backward with self.xp, not np (see autograd.Function), or take "
            "this part's gradient without create_graph")

    def __repr__(self):
        return f"<{self.name}: {self.rule}>"

    def __copy__(self):  # the higher-order rule works on a shallow copy of the op (autograd/higher.py)
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        return twin

    def __reduce__(self):  # pickle and deepcopy: its module (xp) and saved arrays belong to the process that ran it
        raise TypeError(f"pickle: {self.name} is an op of a recorded graph, which is never pickled or deep-copied; "
                        "pickle or copy t.detach() (the values without the graph), or the leaves")


def _refuse_inputs(op, inputs):
    """The error for an op's inputs that are not all Tensors on one device."""
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):  # a NumPy array has a .device too: it would fail further on, in no op's words
            raise TypeError(f"{op}: input {i} is a {type(t).__name__}, not a Tensor; wrap it first, Tensor(x)")
    raise RuntimeError(f"{op}: inputs are on different devices ({', '.join(t.device for t in inputs)}); move them "
                       f"with .to({inputs[0].device!r}) first")


def _refuse_tensor_setting(op, params):
    """The error for a tensor that requires grad given to an op as a keyword, a setting: no gradient reaches it."""
    name = next(k for k, v in params.items() if isinstance(v, Tensor) and v._requires_grad)
    raise TypeError(f"{op}.apply: {name}= is a Tensor that requires grad, but keywords are settings, which get no "
                    f"gradient; pass it positionally, {op}.apply(..., {name}), with forward(self, ..., {name}) "
                    f"and one gradient for it from backward (or {name}.data, its array, as a constant)")


def _refuse_output(op, out):
    """The error for an op's forward that returned something other than an array."""
    if isinstance(out, Tensor):
        fix = "forward computes on arrays: return the array (a Tensor's is its .data); backward gives the gradient"
    elif isinstance(out, tuple):
        fix = "an op has one output: return one array, and make one op per output"
    else:
        fix = "return the result as an array (self.xp.asarray(...) makes one)"
    got = "None" if out is None else f"a {type(out).__name__}"
    raise TypeError(f"{op}.forward returned {got}, not an array; {fix}")


def vjp_gradients(op, returned):
    """What `op.backward` returned, as one gradient per input, refused where it cannot be one: a gradient is an
    array of floats (a Tensor under create_graph) or None, one per input. The count is checked, not zipped: an
    input left without its gradient would silently keep none."""
    if isinstance(returned, list):
        raise TypeError(f"{op.name}.backward returned a list; return one array per input, several as a tuple")
    grads = returned if isinstance(returned, tuple) else (returned,)
    if len(grads) != len(op.inputs):
        labels = op.input_labels(len(op.inputs))
        raise RuntimeError(f"{op.name}.backward returned {len(grads)} gradient{'s' * (len(grads) != 1)} for its "
                           f"{len(labels)} input{'s' * (len(labels) != 1)} ({', '.join(labels)}); return one per "
                           "input, in order (None for one that needs none)")
    for i, (x, pg) in enumerate(zip(op.inputs, grads)):  # for every op of every backward: the usual case first
        if pg is None or not x._requires_grad:
            continue
        if type(pg) is not np.ndarray and not isinstance(pg, (Tensor, np.generic)) and backend.device_of(pg) is None:
            label = op.input_labels(len(op.inputs))[i]
            raise TypeError(f"{op.name}.backward returned a {type(pg).__name__} as the gradient for {label}; "
                            f"return an array of {label}'s shape {x.shape} (self.xp.asarray(...) makes one)")
        if pg.dtype.kind not in FLOAT_KINDS:
            label = op.input_labels(len(op.inputs))[i]
            raise TypeError(f"{op.name}.backward returned a gradient of dtype {pg.dtype} for {label} ({x.dtype}); "
                            "a gradient is floating point: compute it from g, whose dtype it takes")
    return grads


def _as_array(data, dtype, device):
    """Convert user data to a backend array: floats keep their dtype, Python floats take the default."""
    if isinstance(data, Tensor):
        data = data.data
    source = backend.device_of(data)
    if source is None:
        python_data = not isinstance(data, np.generic)
        data = _from_python(data)
        if dtype is None and python_data and data.dtype.kind == "f":
            dtype = _default_dtype
        source = "cpu"
    if dtype is not None:
        dtype = np.dtype(dtype)
    kind = (dtype or data.dtype).kind
    if kind not in DATA_KINDS:
        raise TypeError(
            f"Tensor: unsupported dtype {dtype or data.dtype}; use a float (float32, float64), "
            "an integer (token ids) or bool (masks)")
    if dtype is not None:
        _check_numbers(data, dtype)
    device = backend.check_device(source if device is None else device)  # device=0 is no spelling of "cpu"
    if dtype is not None and dtype.kind in "iu" and data.dtype != dtype:
        _check_fits(data, dtype)
    data = backend.to_device(data, device)
    if dtype is not None and data.dtype != dtype:
        data = data.astype(dtype)
    return data, device


def _from_python(data):
    """np.asarray(data), with our words for the two things NumPy refuses in its own: nested lists of unequal
    lengths, and Python integers that no integer dtype holds."""
    try:
        array = np.asarray(data)
    except ValueError as exc:
        if "inhomogeneous" not in str(exc):
            raise
        raise ValueError("Tensor: the nested lists are ragged; every row along an axis must have the same length "
                         "(pad the short ones, or make one tensor per row)") from None
    except OverflowError:
        array = np.asarray(data, dtype=object)
    if array.dtype == object and array.size and all(isinstance(v, int) for v in array.flat):
        big = max(array.flat, key=abs)
        raise ValueError(f"Tensor: the integer {big} does not fit int64, which holds whole numbers from "
                         f"{-2 ** 63} to {2 ** 63 - 1}; use floats for numbers this large")
    return array


def _check_numbers(data, dtype):
    """Refuse data that is not real numbers, though `dtype` names a dtype a tensor holds: NumPy's cast to it would
    drop complex numbers' imaginary parts, read None as NaN and parse strings ("12" as 12), with no error."""
    kind = data.dtype.kind
    if kind in DATA_KINDS:
        return
    if kind == "O":  # an object array of numbers passes: Python ints too large for int64 beside floats
        others = [v for v in data.flat if not isinstance(v, numbers.Real)]
        if not others:
            return
        what = f"holds {others[0]!r} (a {type(others[0]).__name__})"
    else:
        what = f"is {data.dtype}"
    fix = "take its .real, or abs()" if kind == "c" else "give numbers"
    raise TypeError(f"Tensor: the data {what}, which no cast to {dtype} keeps: only real numbers (floats, "
                    f"integers, bools) convert; {fix}")


def _check_fits(data, dtype):
    """Refuse data that integer `dtype` cannot hold exactly: the cast would wrap 300 to 44 in uint8, cut 1.5 to 1."""
    if data.dtype.kind not in "fiu" or not data.size:
        return
    xp, info = backend.xp_for(backend.device_of(data)), np.iinfo(dtype)
    if data.dtype.kind == "f":
        # float(info.max) + 1 is a power of two, exact in floating point: the first value too large
        wrong = ~xp.isfinite(data) | (data != xp.trunc(data)) | (data < info.min) | (data >= float(info.max) + 1)
    else:
        wrong = (data < info.min) | (data > info.max)
    if wrong.any():
        value = data[wrong][0].item()
        raise ValueError(f"Tensor: {value!r} cannot be stored as {dtype}, which holds whole numbers from "
                         f"{info.min} to {info.max}; use a wider dtype, or round or clip the data first")


def float_alike(tensors, floating=False):
    """`tensors` as one op's operands: where floats meet integers or bools, those take the widest float's dtype, as
    in PyTorch (int64 + float32 is float32, where NumPy would make float64); otherwise as they are. `floating`: the
    op computes in floating point whatever it is given (division, exp, log, sqrt, tanh, sigmoid), so operands
    with no float among them take the default float dtype, as in PyTorch (int64 / int64 is float32, not float64)."""
    if not all(isinstance(t, Tensor) for t in tensors):
        return tensors  # Function.apply names the input that is not a Tensor
    floats = [t._data.dtype for t in tensors if t._data.dtype.kind in FLOAT_KINDS]
    if len(floats) == len(tensors) or not (floats or floating):
        return tensors
    dtype = max(floats, key=lambda d: d.itemsize) if floats else _default_dtype
    return [t if t._data.dtype.kind in FLOAT_KINDS else t.astype(dtype) for t in tensors]


MaxResult = collections.namedtuple("MaxResult", ("values", "indices"))  # torch.return_types.max


def _axis(op, axis, dim, default=None, single=False):
    """The axis of a reduction, given as NumPy's `axis` or PyTorch's `dim` (not both); a list becomes a tuple.
    `single`: the op joins along one axis (concat, stack), so a tuple of them is refused."""
    if dim is not None:
        if axis != default:
            raise TypeError(f"{op}: give axis or dim (PyTorch's name for it), not both")
        axis = dim
    axis = tuple(axis) if isinstance(axis, list) else axis
    if single and isinstance(axis, tuple):
        raise TypeError(f"{op}: axis must be one int, got {axis!r}; {op} joins along one axis at a time")
    if axis is not None:
        _check_ints(op, "axis", axis)
    return axis


def _check_ints(op, what, given):
    """Refuse `given` (an int or a tuple of them) if it holds anything but ints, Python's or NumPy's (not bools):
    NumPy's own refusal of 1.0 names no op."""
    for value in given if isinstance(given, tuple) else (given,):
        if type(value) is not int and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise TypeError(f"{op}: {what} must be given as ints, got {given!r}; "
                            "write whole numbers as ints (1, not 1.0)")


def _keepdims(op, keepdims, keepdim):
    """NumPy's `keepdims` or PyTorch's `keepdim` (not both), True or False: keepdims="no" would be truthy."""
    name, flag = ("keepdims", keepdims) if keepdim is None else ("keepdim", keepdim)
    if not (isinstance(flag, bool) or getattr(flag, "dtype", None) == bool and getattr(flag, "ndim", None) == 0):
        raise TypeError(f"{op}: {name} must be True or False, got {flag!r}")
    if keepdim is not None and keepdims:
        raise TypeError(f"{op}: give keepdims or keepdim (PyTorch's name for it), not both")
    return bool(flag)  # NumPy's (CuPy's) bool_, which their reductions refuse, as Python's


class Tensor:
    """An n-d array on a device, with the gradient machinery of `Value`.

    `Tensor(data)` takes a NumPy or CuPy array (or another Tensor's) already of
    the dtype and device asked for as it is, sharing its memory, as np.asarray
    and torch.as_tensor do; anything else (lists, numbers, another dtype or
    device) is a new array. The new tensor is a leaf either way."""

    __slots__ = ("_data", "_grad", "_requires_grad", "device", "_op", "_retains_grad", "name", "_version",
                 "__weakref__")
    __array_ufunc__ = None  # `ndarray * tensor` must come to Tensor.__rmul__, not loop over elements

    def __init__(self, data, requires_grad=False, dtype=None, device=None):
        self._data, self.device = _as_array(data, dtype, device)
        self._version = 0
        self._grad = None
        self._op = None
        self._retains_grad = False
        self.name = None
        self._requires_grad = False
        self.requires_grad = requires_grad

    @classmethod
    def _make(cls, data, device, requires_grad, op):
        """Wrap an op's output array (no conversion, no checks: the hot path)."""
        t = cls.__new__(cls)
        t._data, t.device, t._requires_grad, t._op = data, device, requires_grad, op
        t._grad, t._retains_grad, t.name, t._version = None, False, None, 0
        return t

    data = property(operator.attrgetter("_data"), doc="The tensor's array (NumPy on cpu, CuPy on cuda).")

    @data.setter
    def data(self, array):
        """Another array in place of this one's (what optimizers and merges do): an array, not a list, of a dtype
        a tensor may hold; the tensor takes the array's device. It counts as a change in place (mark_changed),
        as `p.data -= lr * g` is one."""
        device = backend.device_of(array)
        if device is None:
            raise TypeError(f"Tensor.data must be a NumPy or CuPy array, got a {type(array).__name__}; "
                            "make one with numpy.asarray, or a new Tensor(...)")
        if array.dtype.kind not in DATA_KINDS:
            raise TypeError(f"Tensor.data: unsupported dtype {array.dtype}; use a float, an integer or bool array")
        if array.dtype.kind not in FLOAT_KINDS and getattr(self, "_requires_grad", False):
            raise TypeError(f"Tensor.data got an {array.dtype} array, but the tensor requires grad: only "
                            "floating-point tensors can; call .detach() first, or give float data")
        self._data, self.device = array, device
        self.mark_changed()

    def mark_changed(self):
        """Say that this tensor's array was changed in place (an optimizer's step does, and assigning .data):
        an op that saved it for backward then refuses to run its backward, which would mix the values its
        forward saw with the new ones, as PyTorch's version counter does. The memory written is what counts,
        so an op that saved another tensor sharing it (a view: t.T, t.reshape(...), t[a:b]; t.detach();
        Tensor(t.data)) refuses too. Writes into `t.data[...]`, or into any NumPy array behind the engine's
        back (`t.numpy()[0] = 5`, the array a tensor was made from), are not seen: call this after them, on
        any tensor that holds that memory."""
        global _changes
        _changes += 1
        self._version = _changes
        array = self._data
        _settle()
        try:  # an optimizer changes the same arrays every step: after the first, this one line is all it costs
            _marks[id(array)][2] = _changes
        except KeyError:  # the array's first change
            _marks[id(array)] = [weakref.ref(array, lambda _, key=id(array): _dead.append(key)), _span(array),
                                 _changes]

    @property
    def grad(self):
        """d(loss)/d(self) after backward: an array of this tensor's shape, dtype and device (a Tensor with a graph
        of its own after backward(create_graph=True)), or None."""
        return self._grad

    @grad.setter
    def grad(self, grad):
        """Refused here, as in PyTorch, when it cannot be this tensor's gradient: found by the next backward, it would
        stop that backward halfway, with some leaves' gradients added and the graph freed."""
        misfit = None if grad is None else _misfit(self, grad)
        if misfit is not None:
            raise RuntimeError(f"Tensor.grad: {self.name or 'a tensor'} (shape {self.shape}, {self.dtype}, on "
                               f"{self.device}) cannot take a gradient {misfit}; assign an array of the tensor's "
                               "shape, dtype and device (xp.zeros_like(t.data)), or None")
        self._grad = grad

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        if not isinstance(flag, bool):  # requires_grad="no" would be truthy: a gradient where none was meant
            raise TypeError(f"requires_grad must be True or False, got {flag!r}")
        if flag and self.data.dtype.kind not in FLOAT_KINDS:
            raise TypeError(
                f"only floating-point tensors can require grad, this one is {self.data.dtype}; "
                "make it with float data or call .astype('float32') first")
        if not flag and self._op is not None:
            raise RuntimeError("requires_grad: cannot switch off a non-leaf tensor; use .detach()")
        self._requires_grad = flag

    @property
    def op(self):
        """The Function that made this tensor, None for a leaf (what tools read: see Function)."""
        return self._op

    @property
    def inputs(self):
        """The tensors this one was made from: its op's inputs; () for a leaf, or once backward freed them."""
        return (self._op.inputs or ()) if self._op is not None else ()

    shape = property(lambda self: self.data.shape)
    ndim = property(lambda self: self.data.ndim)
    dtype = property(lambda self: self.data.dtype)
    size = property(lambda self: self.data.size)
    is_leaf = property(lambda self: self._op is None)
    T = property(lambda self: self.transpose())

    def __len__(self):
        if self.ndim == 0:  # NumPy's "len() of unsized object" names neither the tensor nor the fix
            raise TypeError(f"len: a 0-d tensor ({self.dtype}) has no length and no rows to iterate; "
                            "use .item() for its number, or reshape(1) for a one-element axis")
        return len(self.data)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        op = f", op={self._op.name}" if self._op is not None else ""
        grad = ", requires_grad=True" if self.requires_grad else ""
        device = f", device='{self.device}'" if self.device != "cpu" else ""
        body = np.array2string(backend.to_host(self.data), separator=", ", prefix="Tensor(")
        shape = f", shape={self.shape}" if self.size == 0 and self.ndim != 1 else ""  # "[]" alone hides (0, 3)
        return f"Tensor({body}{shape}, dtype={self.dtype}{device}{grad}{op})"

    def numpy(self):
        return backend.to_host(self.data)

    def _one(self, op):
        """The single element, for conversions that need exactly one."""
        if self.data.size != 1:
            raise ValueError(f"{op}: only a one-element tensor converts to a Python number, this one has shape "
                             f"{self.shape}; index one element first, or use .tolist()")
        return self.data.item()

    def item(self):
        return self._one("item")

    def __float__(self):
        return float(self._one("float"))

    def __int__(self):
        return int(self._one("int"))

    def __index__(self):  # [10, 20][t]: an integer tensor of one element, as in PyTorch
        if self.data.dtype.kind not in "iu":
            raise TypeError(f"index: only an integer tensor can index, this one is {self.data.dtype}")
        return int(self._one("index"))

    def __format__(self, spec):
        """f"{loss:.4f}": a 0-d tensor formats as its number, as in PyTorch; any other only without a spec."""
        return format(self.item(), spec) if self.ndim == 0 else object.__format__(self, spec)

    def __bool__(self):
        """As in PyTorch: one element is true when nonzero; for any other size the question is ambiguous."""
        if self.data.size != 1:
            values = "no values" if self.data.size == 0 else f"{self.data.size} values"
            raise RuntimeError(f"bool: the truth value of a tensor with {values} (shape {self.shape}) is ambiguous; "
                               "use .any() or .all()")
        return bool(self.data.item())

    def __array__(self, dtype=None, copy=None):
        """The data as a NumPy array, so np.asarray(t) and plotting work: no graph, a copy from a GPU."""
        if copy is False and self.device != "cpu":
            raise ValueError(f"__array__: a {self.device} tensor reaches NumPy only as a copy to the host")
        return np.array(backend.to_host(self.data), dtype=dtype, copy=copy)

    def __array_function__(self, func, types, args, kwargs):
        """NumPy's functions (np.mean(t), np.concatenate([t, u])) see a tensor as its data, as a NumPy array; not
        inside a VJP recorded for create_graph, where numbers computed from a graph's tensors that way would be
        constants of the graph: a wrong second derivative (a shape or a dtype is still read)."""
        tensors = []
        out = func(*_numpy_arrays(args, tensors), **_numpy_arrays(kwargs, tensors))
        if _mode.vjp is not None and isinstance(out, (np.ndarray, np.generic)) and out.dtype.kind in "fc" and any(
                t.requires_grad for t in tensors):
            raise TypeError(numpy_in_vjp(_mode.vjp, f"np.{func.__name__} would take them for constants"))
        return out

    def tolist(self):
        return self.data.tolist()

    def detach(self):
        return Tensor._make(self.data, self.device, False, None)

    def to(self, device):
        if device == self.device:
            return self
        backend.check_device(device)
        backend.xp_for(device)
        if not self.requires_grad or not _mode.grad:
            return Tensor._make(backend.to_device(self.data, device), device, False, None)
        return _ops.ToDevice.apply(self, device=device)

    def cpu(self):
        return self.to("cpu")

    def astype(self, dtype):
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"astype: {dtype!r} is not a dtype; give a NumPy dtype or its name, such as "
                            "'float32', 'float64', 'int64' or 'bool'") from None
        if dtype == self.dtype:
            return self
        if dtype.kind not in DATA_KINDS:
            raise TypeError(f"astype: unsupported dtype {dtype}")
        return _ops.Cast.apply(self, dtype=dtype)

    def retain_grad(self):
        """Keep `.grad` on this non-leaf tensor after backward (leaves always keep theirs)."""
        if not self.requires_grad:
            raise RuntimeError("retain_grad: this tensor does not require grad")
        self._retains_grad = True
        return self

    def backward(self, grad=None, retain_graph=None, create_graph=False):
        """Fill `.grad` of every leaf this tensor was computed from with d(self)/d(leaf).

        Visits tensors in reverse topological order, so each op runs once, after
        all the ops that used its output have added their share of its gradient.
        With `create_graph`, each `.grad` is a Tensor with a graph of its own (it can
        be differentiated again), and the graph is kept unless retain_graph=False
        (as in PyTorch: retain_graph defaults to create_graph). The graph then holds
        the leaves, whose `.grad` holds it: set `.grad = None` after use, or use ag.grad.
        """
        free = not (create_graph if retain_graph is None else retain_graph)
        if create_graph:
            with enable_grad():  # recorded under no_grad() too: see backward_steps
                for t, g, _ in backward_steps(self, _higher.root_tensor(self, grad, "backward"), free, True):
                    if t._op is None or t._retains_grad:
                        if t.grad is None:  # a copy that keeps g's graph, as PyTorch's: g may be another
                            # leaf's, the caller's seed, or an array the graph saved
                            t.grad = _ops.Cast.apply(g, dtype=t.data.dtype)
                        else:
                            t.grad = t.grad + g if _mode.anomaly is None else _mode.anomaly.add_to_grad(t, g)
            return
        grad = root_grad(self, grad, "backward")
        adopted = {id(grad)}  # the caller may hold `grad`: never adopt it as a .grad
        for t, g, _ in backward_steps(self, grad, free=free):
            if t._op is None or t._retains_grad:
                _accumulate(t, g, adopted)

    def _lift(self, other):
        """A constant operand as a Tensor; Python numbers and lists take this tensor's float dtype, as in
        PyTorch (`float32 + [1, 2]` stays float32), and a Python int that an integer tensor's dtype holds takes
        that dtype, as in NumPy and PyTorch (`int32 + 1` stays int32; one it cannot hold widens the result rather
        than wrap). A NumPy number (np.float32(0), np.int64(3)) counts as the Python number it holds, as in
        PyTorch: np.float64 is a Python float already, and float16 * np.float32(2) would otherwise be float32
        where float16 * np.float64(2) stays float16. NumPy arrays keep their dtype and NumPy's promotion."""
        if isinstance(other, Tensor):
            return other
        if isinstance(other, np.generic) and other.dtype.kind in "iuf":  # not np.bool_: PyTorch widens it
            other = other.item()
        dtype = self.data.dtype
        if dtype.kind in FLOAT_KINDS:
            if isinstance(other, (int, float)):
                return Tensor._make(backend.xp_for(self.device).asarray(other, dtype=dtype), self.device, False, None)
            if isinstance(other, (list, tuple)):
                return Tensor(other, dtype=dtype, device=self.device)
        elif dtype.kind in "iu" and isinstance(other, int) and np.iinfo(dtype).min <= other <= np.iinfo(dtype).max:
            return Tensor._make(backend.xp_for(self.device).asarray(other, dtype=dtype), self.device, False, None)
        return Tensor(other, device=self.device)

    def _binary(self, op, other, reflected=False, floating=False):
        """op(self, other), or op(other, self) if `reflected`: `other` lifted, then float_alike's rule."""
        try:
            other = self._lift(other)
        except TypeError:  # Tensor's own refusal would name Tensor, not the operator the user wrote
            raise TypeError(f"{op.__name__}: cannot compute with a {type(other).__name__} operand; use a Tensor, "
                            "a number, or a list or array of numbers") from None
        pair = float_alike((self, other), floating)
        return op.apply(*(pair[::-1] if reflected else pair))

    def __add__(self, other): return self._binary(_ops.Add, other)
    def __radd__(self, other): return self._binary(_ops.Add, other, reflected=True)
    def __sub__(self, other): return self._binary(_ops.Sub, other)
    def __rsub__(self, other): return self._binary(_ops.Sub, other, reflected=True)
    def __mul__(self, other): return self._binary(_ops.Mul, other)
    def __rmul__(self, other): return self._binary(_ops.Mul, other, reflected=True)
    def __truediv__(self, other): return self._binary(_ops.Div, other, floating=True)
    def __rtruediv__(self, other): return self._binary(_ops.Div, other, reflected=True, floating=True)
    def __pow__(self, other): return self._binary(_ops.Pow, other)
    def __rpow__(self, other): return self._binary(_ops.Pow, other, reflected=True)
    def __matmul__(self, other): return self._binary(_ops.MatMul, other)
    def __rmatmul__(self, other): return self._binary(_ops.MatMul, other, reflected=True)
    def __neg__(self): return _ops.Neg.apply(self)

    def _augmented(self, op, symbol, other, floating=False):
        """`self op= other`: a new tensor, as `self = self op other` (nothing is written into self's array), refused
        where other would broadcast self to a larger shape, as NumPy and PyTorch refuse to write that into self:
        `total += losses` would silently make a total of shape () one of the losses' shape (N,)."""
        try:
            grown = np.broadcast_shapes(self.shape, np.shape(other))
        except ValueError:  # shapes that do not broadcast at all: the op's own error names them
            grown = self.shape
        if grown != self.shape:
            raise ShapeError(f"{symbol} ({op.__name__}): a tensor of shape {self.shape} cannot take an operand of "
                             f"shape {np.shape(other)} in place, which would broadcast it to {grown}; a {symbol} b "
                             f"keeps a's shape, as in NumPy and PyTorch: write a = a {symbol[:-1]} b for the "
                             f"broadcast result, or reduce b to shape {self.shape}")
        return self._binary(op, other, floating=floating)

    def __iadd__(self, other): return self._augmented(_ops.Add, "+=", other)
    def __isub__(self, other): return self._augmented(_ops.Sub, "-=", other)
    def __imul__(self, other): return self._augmented(_ops.Mul, "*=", other)
    def __itruediv__(self, other): return self._augmented(_ops.Div, "/=", other, floating=True)
    def __ipow__(self, other): return self._augmented(_ops.Pow, "**=", other)

    def _compare(self, other, op):
        """An element-wise comparison (operator.lt, ...), outside the graph: a bool tensor. None and text are no
        operands, as in PyTorch: `t == None` is False and `t in [None]` a membership test, not an element-wise
        comparison whose truth is ambiguous; anything else NumPy compares with an array is compared."""
        if isinstance(other, Tensor):
            other = other.data
        elif other is None or isinstance(other, (str, bytes)):
            return NotImplemented
        try:
            result = op(self.data, other)
        except ValueError as exc:
            if isinstance(other, (list, tuple)):
                _from_python(other)  # a ragged list: its own error says so, rather than blaming broadcasting
            raise ShapeError(f"{op.__name__}: {str(exc).strip()}; broadcasting needs each trailing axis equal or 1") from None
        # asarray: NumPy compares 0-d arrays into a scalar, and .data must be an array
        return Tensor._make(backend.xp_for(self.device).asarray(result), self.device, False, None)

    def __lt__(self, other): return self._compare(other, operator.lt)
    def __le__(self, other): return self._compare(other, operator.le)
    def __gt__(self, other): return self._compare(other, operator.gt)
    def __ge__(self, other): return self._compare(other, operator.ge)
    def __eq__(self, other): return self._compare(other, operator.eq)
    def __ne__(self, other): return self._compare(other, operator.ne)
    __hash__ = object.__hash__

    # Reductions take NumPy's axis/keepdims or PyTorch's dim/keepdim.

    def sum(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return _ops.Sum.apply(self, axis=_axis("sum", axis, dim), keepdims=_keepdims("sum", keepdims, keepdim))

    def mean(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        """Σ x / n over `axis`; NaN for no elements (0 / 0), as in PyTorch.

        float16 is averaged in float32 and rounded once, as PyTorch and NumPy do: its sum passes 65504, float16's
        largest, long before its mean does (70000 ones).
        """
        axis, keepdims = _axis("mean", axis, dim), _keepdims("mean", keepdims, keepdim)
        if self.dtype == np.float16:
            return self.astype(np.float32).mean(axis, keepdims).astype(np.float16)
        count = _count(self.shape, axis, "mean")
        if not count:
            return self.sum(axis, keepdims) * _Constant.of(self, math.nan, "Mean's 1/n, for n = 0 elements")
        return self.sum(axis, keepdims) * (1.0 / count)

    def var(self, axis=None, keepdims=False, ddof=0, *, dim=None, keepdim=None):
        """Σ (x − μ)² / (n − ddof) over `axis` (NumPy's ddof=0 by default; PyTorch's is 1).

        With ddof ≥ n no degrees of freedom are left and, as in PyTorch (which
        divides by max(0, n − ddof)), the variance is inf, or NaN where every value
        equals μ, with a warning: never the negative number n − ddof < 0 would give.
        float16 is computed in float32 and rounded once, as PyTorch does: a square passes 65504, float16's
        largest, from |x − μ| = 256.
        """
        axis, keepdims = _axis("var", axis, dim), _keepdims("var", keepdims, keepdim)
        if self.dtype == np.float16:
            return self.astype(np.float32).var(axis, keepdims, ddof).astype(np.float16)
        check("var", "ddof", ddof, "[0, inf)")
        count = _count(self.shape, axis, "var")
        freedom = count - ddof
        mean = self.mean(axis, keepdims=True)
        if freedom <= 0:
            warnings.warn(f"var: n = {count} values with ddof = {ddof} leave no degrees of freedom; the variance "
                          "is inf (NaN where all values are equal)", RuntimeWarning, stacklevel=2)
            # μ held constant changes no gradient (Σ(x − μ) = 0) and keeps 1/0's inf out of it,
            # where inf − inf would make every entry NaN: PyTorch's 2(x − μ)/0 · g, entry by entry
            mean = mean.detach()
        centred = self - mean
        if freedom <= 0:
            return (centred * centred).sum(axis, keepdims) * _Constant.of(
                self, math.inf, f"Var's 1/(n − ddof), for n = {count} values with ddof = {ddof}")
        return (centred * centred).sum(axis, keepdims) * (1.0 / freedom)

    def max(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        """The largest value over `axis` (NumPy's max); tied maxima share its gradient equally (DESIGN.md).

        PyTorch's spelling, max(dim=d), returns what torch.max(x, dim=d) returns:
        (values, indices), the index of the first maximum along d, so that
        `values, indices = x.max(dim=0)` means here what it means there. The
        values' gradient is still shared among tied maxima, where torch.max(x, d)
        gives it all to the returned index (and torch.amax shares it, as here).
        """
        keepdims = _keepdims("max", keepdims, keepdim)
        if dim is None:
            return _ops.Max.apply(self, axis=_axis("max", axis, None), keepdims=keepdims)
        if axis is not None:
            raise TypeError("max: give axis or dim (PyTorch's name for it), not both")
        if not isinstance(dim, int):
            raise TypeError(f"max: dim must be one int, as in torch.max, got {dim!r}; "
                            "for the maximum over several axes use max(axis=(...))")
        values = _ops.Max.apply(self, axis=dim, keepdims=keepdims)
        xp = backend.xp_for(self.device)
        indices = xp.asarray(xp.argmax(self.data, axis=dim, keepdims=keepdims))  # an array even from a 1-d tensor
        return MaxResult(values, Tensor._make(indices, self.device, False, None))

    def any(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        """Whether any element over `axis` is nonzero: a bool tensor, outside the graph."""
        return self._truth(self.data.any, _axis("any", axis, dim), _keepdims("any", keepdims, keepdim))

    def all(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        """Whether every element over `axis` is nonzero: a bool tensor, outside the graph."""
        return self._truth(self.data.all, _axis("all", axis, dim), _keepdims("all", keepdims, keepdim))

    def _truth(self, reduce, axis, keepdims):
        if axis is not None:
            _check_in_range(reduce.__name__, self.shape, axis if isinstance(axis, tuple) else (axis,),
                            reduction=True)
        return Tensor._make(backend.xp_for(self.device).asarray(reduce(axis=axis, keepdims=keepdims)),
                            self.device, False, None)

    def exp(self): return _ops.Exp.apply(*float_alike([self], floating=True))
    def log(self): return _ops.Log.apply(*float_alike([self], floating=True))
    def sqrt(self): return _ops.Sqrt.apply(*float_alike([self], floating=True))
    def tanh(self): return _ops.Tanh.apply(*float_alike([self], floating=True))
    def sigmoid(self): return _ops.Sigmoid.apply(*float_alike([self], floating=True))
    def relu(self): return _ops.ReLU.apply(self)
    def gelu(self): return _ops.GELU.apply(self)

    def softmax(self, axis=-1, *, dim=None):
        return _ops.Softmax.apply(self, axis=_axis("softmax", axis, dim, -1))

    def log_softmax(self, axis=-1, *, dim=None):
        return _ops.LogSoftmax.apply(self, axis=_axis("log_softmax", axis, dim, -1))

    def reshape(self, *shape):
        shape = tuple(shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)
        _check_ints("reshape", "shape", shape)
        return _ops.Reshape.apply(self, shape=shape)

    def view(self, *shape):
        """PyTorch's name for reshape. Tensors here change only through .data, which a reshape shares
        wherever NumPy can (as a view does); where it cannot, the result is a copy rather than an error."""
        return self.reshape(*shape)

    def transpose(self, *axes):
        axes = tuple(axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes)
        _check_ints("transpose", "axes", axes)
        n = self.ndim
        if axes and sorted(a % n if n else a for a in axes) != list(range(n)):  # NumPy's wording names no fix
            two = len(axes) == 2 and all(-n <= a < n for a in axes) and axes[0] % n != axes[1] % n
            pair = f"; to exchange two axes, swapaxes({axes[0]}, {axes[1]})" if two else ""
            raise ShapeError(f"transpose: axes {axes} are not a permutation of the {self.ndim} axes of shape "
                             f"{self.shape}; give every axis once, as NumPy's transpose does{pair}")
        return _ops.Transpose.apply(self, axes=axes or None)

    def swapaxes(self, axis1, axis2):
        """The two axes exchanged (NumPy's swapaxes; PyTorch's transpose(d0, d1))."""
        _check_ints("swapaxes", "axes", (axis1, axis2))
        _check_in_range("swapaxes", self.shape, (axis1, axis2))
        axes = list(range(self.ndim))
        axes[axis1], axes[axis2] = axes[axis2], axes[axis1]
        return _ops.Transpose.apply(self, axes=tuple(axes))

    def __getitem__(self, key):
        key, advanced = _index_key(key, self._data.shape, self.device)
        return _ops.GetItem.apply(self, key=key, advanced=advanced)


class _Constant(Tensor):
    """A constant a method composes into its ops, that says `why` it is there: anomaly mode then blames the
    method (Mean's 1/n for n = 0) rather than "a leaf" the user never made."""

    __slots__ = ("why",)

    @classmethod
    def of(cls, like, value, why):
        """`value` as a constant of `like`'s dtype and device, explained by `why`."""
        constant = cls._make(backend.xp_for(like.device).asarray(value, dtype=like.dtype), like.device, False, None)
        constant.why = why
        return constant


def numpy_in_vjp(op_name, why):
    """The error for NumPy's functions called on the Tensors of a VJP that create_graph records."""
    return (f"{op_name}.backward under create_graph=True: its VJP runs on Tensors there, and {why}; compute it with "
            "self.xp (self.xp.exp, self.xp.where, ...: NumPy's names on arrays and on Tensors alike)")


def topological_order(root):
    """Tensors that need a gradient, reachable from `root`, each before the tensors it was computed from.

    Iterative depth-first search, so a 20,000-op chain needs no recursion.
    """
    order, visited = [], set()
    stack = [(root, False)]
    while stack:
        t, inputs_done = stack.pop()
        if inputs_done:
            order.append(t)
            continue
        if id(t) in visited:
            continue
        visited.add(id(t))
        stack.append((t, True))
        if t._op is not None and t._op.inputs is not None:
            stack.extend((p, False) for p in t._op.inputs if p._requires_grad and id(p) not in visited)
    order.reverse()
    return order


def root_grad(root, grad, op):
    """The gradient backward starts from: `grad` checked against `root`, or 1 for a scalar root."""
    if not root.requires_grad:
        raise RuntimeError(
            f"{op}: this tensor does not require grad: none of its inputs had "
            "requires_grad=True, or it was computed under no_grad()")
    if grad is None:
        if root.data.size != 1:
            raise RuntimeError(
                f"{op}: a gradient can be implied only for a scalar, this tensor has shape "
                f"{root.shape}; reduce it first (e.g. .sum()) or pass grad= of that shape")
        return backend.xp_for(root.device).ones_like(root.data)
    grad, _ = _as_array(grad, root.dtype, root.device)
    if grad.shape != root.shape:
        raise ShapeError(f"{op}: grad has shape {grad.shape} but the tensor has shape {root.shape}; pass a "
                         f"gradient of shape {root.shape}, one entry per element (it is never broadcast)")
    return grad


def backward_steps(root, grad, free=True, create_graph=False):
    """The backward pass from `root` (whose gradient is `grad`), one tensor at a time.

    Yields (t, g, sent) for each tensor that needs a gradient, in reverse
    topological order: g = ∂L/∂t, complete by then, and `sent`, one
    (input, gradient, shape the op returned) per input of t's op, the gradient
    summed back to the input's shape (None where no gradient flows). Tensor.backward
    stores the leaves' g; viz.trace prints every step. With `free`, each op's
    saved arrays are dropped as soon as its VJP has run (under detect_anomaly with
    pictures, kept until the graph goes, so the pictures can show the whole pass),
    and an op with backward_into adds its VJP into its input's gradient so far,
    in place, and sends nothing (its `sent` is empty). With `create_graph`, `grad` and every gradient are Tensors: each VJP is recorded
    as ops of the graph (higher.vjp_in_graph), so the gradients can be differentiated again. The walk's own sums (a
    tensor's parts, a part summed back over broadcast axes) are ops too, recorded only while grad mode is on: run
    it inside enable_grad(), as backward and ag.grad do (PyTorch's engine records under no_grad() too), else a
    gradient of several parts comes out without their graph.
    """
    checks = None  # detect_anomaly's checks of this pass: its own, as a checkpoint's backward runs a pass inside it
    if _mode.anomaly is not None:
        checks, free = _mode.anomaly.begin_backward(root, grad.data if create_graph else grad, free)
    grads = {id(root): grad}
    # Where nothing reads an op's own VJP (`sent`: viz.trace and divergence walk with free=False), a running sum
    # that this walk made is added into in place: these tensors' ids
    in_place, owned = free and not create_graph and checks is None, set()
    order = topological_order(root)
    ran = 0  # ops whose VJP has run: the step a recorded VJP's ops are named after, and anomaly mode reports
    for i in range(len(order)):
        t, order[i] = order[i], None  # hold no reference: a used activation can be freed during backward
        g = grads.pop(id(t), None)
        owned.discard(id(t))
        if g is None:
            continue
        op, sent = t._op, []
        if op is not None:
            if op.inputs is None:
                raise RuntimeError(
                    f"backward: the graph through {op.name} was freed by an earlier backward(); "
                    "call the first backward(retain_graph=True) to go through it twice")
            if op.changes != _changes:
                _refuse_changed(op, t)
            ran += 1
            if create_graph:
                input_grads = _higher.vjp_in_graph(op, t, g, ran)
            elif op.backward_into is not None and id(op.inputs[0]) in owned:
                op.backward_into(g, grads[id(op.inputs[0])])
                input_grads = ()  # added into the input's running sum: nothing to send
            else:
                op.last_use = free
                input_grads = vjp_gradients(op, op.backward(g.astype("float32") if op.widened else g))
            if checks is not None:
                checks.check(t, *(_higher.arrays(g, input_grads) if create_graph else (g, input_grads)), ran)
            for x, pg in zip(op.inputs, input_grads):
                if pg is None or not x._requires_grad:
                    sent.append((x, None, None))
                    continue
                returned = pg.shape
                if pg.shape != x.data.shape or pg.dtype != x.data.dtype:
                    # under detect_anomaly checked as this step's: a finite VJP summed or cast down can overflow
                    pg = _fit(pg, x, op, t) if checks is None else checks.fitted(x, pg, t, g, ran)
                previous = grads.get(id(x))
                if previous is None:
                    grads[id(x)] = pg
                    if in_place and op.backward_into is not None:  # its backward's array is a fresh one
                        owned.add(id(x))
                elif id(x) in owned:
                    previous += pg
                elif checks is not None:
                    grads[id(x)] = checks.add(x, previous, pg, t, g, ran)
                else:
                    grads[id(x)] = total = previous + pg
                    if in_place and total.ndim:  # a 0-d sum is NumPy's scalar, which cannot be added into
                        owned.add(id(x))
                sent.append((x, pg, returned))
            if free:
                op.inputs = op.saved = op.params = None
        yield t, g, sent


def _span(array):
    """(device, first byte, byte past the last) of the memory `array`'s elements occupy, as NumPy's byte_bounds:
    two arrays may share memory only where their spans overlap, the test np.may_share_memory makes."""
    if array.size == 0:
        return backend.device_of(array), 0, 0  # no elements: overlaps nothing
    low = high = backend.pointer(array)
    for n, stride in zip(array.shape, array.strides):
        if stride < 0:
            low += stride * (n - 1)
        else:
            high += stride * (n - 1)
    return backend.device_of(array), low, high + array.itemsize


def _overlap(a, b):
    """Whether two spans share a byte."""
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def _settle():
    """The changed arrays freed since (_dead): each one's entry moves from _marks to _freed, keeping the span it
    changed, as its memory may live on (a view's, in its base)."""
    while _dead:
        _, span, when = _marks.pop(_dead.pop())
        _freed[span] = when
    if len(_freed) > _FREED_KEPT:  # memory stays bounded: the newest half of the bound stays
        for span, _ in sorted(_freed.items(), key=operator.itemgetter(1))[:len(_freed) - _FREED_KEPT // 2]:
            del _freed[span]


def _changed_since(count):
    """The spans of memory changed in place since the `count`th change. Sound for arrays alive since then, as an
    op's saved arrays, inputs and output are: memory a changed array held was no other's while both lived."""
    _settle()
    return ([span for _, span, when in _marks.values() if when > count]
            + [span for span, when in _freed.items() if when > count])


def _refuse_changed(op, out):
    """Refuse to run `op`'s backward if an array it reads there, one it saved or (for an op that recomputes,
    Checkpoint) an input's, was changed in place since its forward ran (Tensor.mark_changed), through any tensor
    sharing its memory: the VJP would mix the values the forward saw with the new ones. An array put in place of
    a tensor's (`t.data = new`) leaves the saved one as it was. (A Checkpoint also checks the tensors its function
    reads that are not its inputs, the weights a block closes over, when it runs the function again:
    Checkpoint.backward.)"""
    named = [*zip(op.input_labels(len(op.inputs)), op.inputs), ("its output", out)]
    read = [a for a in op.saved if backend.device_of(a) is not None]
    if op.runs_user_code:
        read += [x._data for x in op.inputs]
    if not read:  # an op that reads nothing in backward (Add, Sum) cannot be misled by a change
        return
    changed = _changed_since(op.changes)
    written = []  # (an array backward reads, its span, a changed span it meets)
    for a in read:
        span = _span(a)
        written += [(a, span, c) for c in changed if _overlap(span, c)]
    if not written:
        return
    for label, x in named:  # whose memory it is (in one dimension, three spans that overlap pairwise share a byte)
        mine = _span(x._data)
        if any(_overlap(mine, span) and _overlap(mine, c) for _, span, c in written):
            break
    else:
        label, x = "an array it saved", written[0][0]
    where = f" in {op.scope}" if op.scope else ""
    name = f" '{x.name}'" if getattr(x, "name", None) else ""
    raise RuntimeError(
        f"backward: {op.name}{where}: {label}{name} (shape {x.shape}) was changed in place after the "
        f"forward that saved it (an optimizer's step, or `.data -= ...`), so its gradient would mix the old "
        "values with the new; call backward() before opt.step(), or run the forward again")


def _accumulate(t, g, adopted):
    """Add `g` into `t.grad`, which must never share memory with another tensor's grad."""
    grad = t._grad  # the slot, not the property: what is set here fits by construction, as checked below
    if grad is None:
        t._grad = own_gradient(g, t, adopted)
        return
    misfit = _misfit(t, grad)
    if misfit is not None:  # the tensor's .data was replaced by an array of another shape, dtype or device since
        raise RuntimeError(f"backward: the .grad already on {t.name or 'a tensor'} (shape {t.shape}, {t.dtype}, on "
                           f"{t.device}) is {misfit}, so this gradient cannot be added to it; set .grad to None "
                           "first (zero_grad), or assign an array of the tensor's shape, dtype and device")
    if isinstance(grad, Tensor):  # a backward(create_graph=True) left it: the sum keeps its graph, g a constant
        t._grad = grad + g if _mode.anomaly is None else _mode.anomaly.add_to_grad(t, g)
    elif _mode.anomaly is not None:  # the sum checked before .grad holds it: two finite parts can overflow
        grad[...] = _mode.anomaly.add_to_grad(t, g)
    else:
        grad += g


def _misfit(t, grad):
    """How `grad` (an array, or a Tensor with a graph) differs from a gradient `t` can hold, which has t's shape,
    dtype and device; None where it fits."""
    device = backend.device_of(array_of(grad))
    if device is None:
        return f"that is a {type(grad).__name__}"
    if device != t.device or grad.shape != t.shape or grad.dtype != t.dtype:
        return f"of shape {grad.shape}, {grad.dtype}, on {device}"
    return None


def own_gradient(g, t, adopted):
    """`g` as an array that `t` may keep as its gradient, sharing memory with no other's.

    A gradient that owns its memory and was handed to no other tensor in this
    backward (`adopted` holds the ids of those that were) is kept as it is; a
    view, a read-only broadcast or a shared array is copied.
    """
    if (getattr(g, "base", 0) is None and getattr(g.flags, "writeable", True) and id(g) not in adopted
            and g.dtype == t.data.dtype and g.ndim == t.data.ndim):
        adopted.add(id(g))
        return g
    # xp.array, not g.astype: a NumPy op on 0-d arrays returns a scalar, and a gradient must be an array
    return backend.xp_for(t.device).array(g, dtype=t.data.dtype, copy=True)


def _fit(grad, x, op, out):
    """The gradient `op`'s VJP returned for its input `x`, as x's: summed over the axes broadcasting stretched,
    cast to x's dtype. `out` is op's output."""
    if grad.shape != x.data.shape:
        grad = _unbroadcast(grad, x.data.shape, op, out)
    if grad.dtype != x.data.dtype:
        grad = grad.astype(x.data.dtype)
    return grad


def _unbroadcast(grad, shape, op, out):
    """Broadcasting's adjoint: sum `grad` over the axes that broadcasting added or stretched. Broadcasting within
    op adds no more axes than its output or its widest input has: a gradient with more was not stretched."""
    extra = grad.ndim - len(shape)
    widest = max(out.ndim, *(x.ndim for x in op.inputs))
    if extra < 0 or grad.ndim > widest or any(n != 1 and n != m for n, m in zip(shape, grad.shape[extra:])):
        raise ShapeError(
            f"{op.name}.backward returned a gradient of shape {grad.shape} for an input of shape {shape} (output "
            f"shape {out.shape}): the op's VJP is wrong; return each input's gradient in its shape")
    axes = tuple(range(extra)) + tuple(
        extra + i for i, n in enumerate(shape) if n == 1 and grad.shape[extra + i] != 1)
    if isinstance(grad, Tensor):  # under create_graph: the op Sum, which adds float16 in float32 as wide_sum does
        return grad.sum(axis=axes, keepdims=True).reshape(shape)
    return backend.wide_sum(grad, axes, keepdims=True).reshape(shape)


def _count(shape, axis, op):
    """How many elements reduction `op` over `axis` combines."""
    if axis is None:
        return int(np.prod(shape))
    axes = (axis,) if isinstance(axis, int) else axis
    _check_in_range(op, shape, axes, reduction=True)
    # an axis named twice: else Sum, which mean and var are made of, refuses it
    if len({a % max(len(shape), 1) for a in axes}) < len(axes):
        raise ShapeError(f"{op}: axis {axis} names an axis of shape {shape} twice (-1 is the last axis); "
                         "give each axis once")
    return int(np.prod([shape[a] for a in axes])) if shape else 1  # a 0-d tensor: its one element


def _check_in_range(op, shape, axes, reduction=False):
    """Refuse an int of `axes` that names no axis of `shape` (they run from −ndim to ndim − 1). A `reduction` of
    a 0-d tensor may name axis 0 or −1, as in PyTorch and as Sum and Max take it: x.mean(0) is x, as x.sum(0) is."""
    ndim = max(len(shape), 1) if reduction else len(shape)
    for a in axes:
        if not -ndim <= a < ndim:
            if shape:
                there = f"its axes are {-ndim} to {ndim - 1}"
            else:
                there = "a 0-d tensor reduces over axis 0 or -1 only" if reduction else "a 0-d tensor has no axes"
            raise ShapeError(f"{op}: axis {a} is out of range for shape {shape}; {there}")


def array_of(x):
    """x's array where x is a Tensor (a gradient under create_graph, a Tensor argument), else x as it is."""
    return x.data if isinstance(x, Tensor) else x


def _numpy_arrays(value, tensors):
    """`value` with every Tensor in it (inside lists, tuples and dicts too) replaced by its data as a NumPy array;
    each Tensor replaced is appended to `tensors`."""
    if isinstance(value, Tensor):
        tensors.append(value)
        return value.__array__()
    if isinstance(value, (list, tuple)):
        converted = [_numpy_arrays(v, tensors) for v in value]
        return converted if isinstance(value, list) else tuple(converted)
    if isinstance(value, dict):
        return {k: _numpy_arrays(v, tensors) for k, v in value.items()}
    return value


def _index_key(key, shape, device):
    """Indexing keys for a tensor of `shape` as backend arrays, a boolean mask as the integer arrays of its
    positions; reports whether any is an array (advanced indexing)."""
    parts, advanced = [], False
    for part in key if isinstance(key, tuple) else (key,):
        if isinstance(part, (Tensor, list, np.ndarray)) or backend.device_of(part) is not None:
            try:
                array, _ = _as_array(part, None, device)
            except (TypeError, ValueError):  # Tensor's own refusal would name Tensor, which the user never made
                raise IndexError(f"getitem: an index list or array must hold integers or bools, in rows of one "
                                 f"length (tensor of shape {shape}); put slices, None and ... beside it in the key, "
                                 f"not inside it") from None
            if isinstance(part, list) and not array.size:  # picks nothing: an integer index, as in NumPy (not the
                array = array.astype("int64")              # default float of a list of no numbers)
            if array.dtype.kind not in "iub":
                raise IndexError(f"getitem: index arrays must be integer or bool, got {array.dtype} (tensor of shape "
                                 f"{shape}); convert the index with .astype('int64')")
            part, advanced = array, True
        parts.append(part)
    if not advanced:  # no mask to check against the axes it covers
        return tuple(parts), False
    out, axis = [], 0
    for part in parts:
        if part is Ellipsis:
            axis += len(shape) - sum(map(_axes_indexed, parts))
        elif getattr(part, "ndim", 0) and part.dtype.kind == "b":
            # a mask must be the shape of the axes it covers: nonzero() of one that is not gives positions that
            # pick the wrong elements, silently
            if part.shape != shape[axis:axis + part.ndim]:
                raise IndexError(
                    f"getitem: a boolean mask of shape {part.shape} must have the shape of the axes it indexes, "
                    f"{shape[axis:axis + part.ndim]} (from axis {axis} of shape {shape}); make the mask that shape")
            out.extend(part.nonzero())
            axis += part.ndim
            continue
        out.append(part)
        axis += _axes_indexed(part)
    return tuple(out), advanced


def _axes_indexed(part):
    """How many of the tensor's axes a part of an indexing key indexes: a boolean mask as many as it has (a 0-d
    one, True or False, adds an axis, of length 1 or 0, as None adds one), None and `...` none here, others one."""
    if part is None or part is Ellipsis or isinstance(part, bool):
        return 0
    return part.ndim if getattr(part, "dtype", None) is not None and part.dtype.kind == "b" else 1
