"""What `viz.graph` and `viz.trace` read from the engine's graph, in one place.

`GraphWalk(root)` lists the tensors and ops reachable from `root` in the order
`Tensor.backward` visits them, gives every tensor a short label (its `.name`,
or t1, t2, … numbered in the order the forward pass made them), and records
who consumes what and which arrays the ops saved for backward. It only reads:
nothing in the graph is changed.

Also here: the small number formatting both tools share, and how a module
name given on the command line (`model.bigram`, `models/bigram.py`) becomes
the module whose `demo_loss()` they draw or trace.
"""
import importlib
import os

import numpy as np

from autograd import backend
from autograd import Tensor, topological_order


class GraphWalk:
    """The graph below `root`, read once.

    Attributes:
        root      the tensor backward starts from.
        order     tensors that need a gradient, root first: exactly `topological_order(root)`.
        ops       the op nodes (Function objects) in the order backward runs them.
        constants input tensors that need no gradient (data, Python numbers), in forward order.
        tensors   every tensor above, in forward order (inputs before the results made from them).
        freed     ops whose inputs a backward() without retain_graph has already let go of.
    """

    def __init__(self, root):
        if not isinstance(root, Tensor):
            raise TypeError(f"expected an autograd Tensor, got {type(root).__name__}")
        self.root = root
        self.order = topological_order(root) if root.requires_grad else [root]
        self.ops = [t.op for t in self.order if t.op is not None]
        self.freed = [op for op in self.ops if op.inputs is None]
        self.output_of = {id(t.op): t for t in self.order if t.op is not None}
        self.consumers = {}  # id(tensor) -> ops that take it as an input
        self.constants = []
        self.tensors = []
        self.labels = {}
        seen = set()
        counter = 0

        def visit(t):
            nonlocal counter
            if id(t) in seen:
                return
            seen.add(id(t))
            counter += 1
            self.tensors.append(t)
            self.labels[id(t)] = t.name or f"t{counter}"
            if not t.requires_grad:
                self.constants.append(t)

        for t in reversed(self.order):  # forward order: every input before its result
            for x in t.inputs:
                visit(x)
                self.consumers.setdefault(id(x), []).append(t.op)
            visit(t)

        self._backward_ran = None
        self.saved_arrays = {}  # id(array) -> the ops that keep it for backward
        for op in self.ops:
            for a in self.saved(op):
                self.saved_arrays.setdefault(id(a), []).append(op)

    @staticmethod
    def saved(op):
        """The arrays an op keeps for its backward (empty for ops that need none, or once freed)."""
        return [a for a in (op.saved or ()) if a is not None and hasattr(a, "shape")]

    def label(self, t):
        return self.labels.get(id(t)) or t.name or "?"

    def is_saved(self, t):
        """Whether some op keeps this very tensor's data for backward."""
        return id(t.data) in self.saved_arrays

    def saved_by(self, t):
        """The ops that keep this tensor's data for backward."""
        return self.saved_arrays.get(id(t.data), [])

    def backward_ran(self):
        """Whether backward has been run here: a tensor holds a gradient, or backward freed an op."""
        if self._backward_ran is None:
            self._backward_ran = bool(self.freed) or any(t.grad is not None for t in self.tensors)
        return self._backward_ran


# ---- formatting numbers ----------------------------------------------------------------


def host(array):
    """A NumPy array, wherever `array` lives (CuPy arrays are copied to the host)."""
    return backend.to_host(array) if backend.device_of(array) == "cuda" else np.asarray(array)


def norm(array):
    """The L2 norm of an array (of all its elements), as a Python float."""
    return float(np.linalg.norm(host(array).astype(np.float64).ravel()))


def shape_text(shape):
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def number(x, digits=4):
    """A short number for a label: 4 significant digits."""
    return f"{x:.{digits}g}"


def values_text(array, decimals=6):
    """An array's values rounded to `decimals`, in NumPy's layout (one line per row, columns aligned)."""
    a = np.round(host(array).astype(np.float64), decimals) + 0.0  # + 0.0 turns −0.0 into 0.0
    if a.ndim == 0:
        return np.format_float_positional(float(a), precision=decimals, unique=True, trim=".").rstrip(".") \
            if float(a) != int(a) else f"{float(a):.1f}"
    return np.array2string(a, separator=", ", precision=decimals, floatmode="fixed", suppress_small=True,
                           max_line_width=100, threshold=10**9)


# ---- the command line's module argument ----------------------------------------------------


def module_name(name):
    """The importable dotted name for what a user typed: `model.bigram` and `models/bigram.py` mean `models.bigram`."""
    name = name.strip()
    if name.endswith(".py") or os.sep in name or "/" in name:
        name = os.path.normpath(name[:-3] if name.endswith(".py") else name)
        name = name.replace(os.sep, ".").replace("/", ".").lstrip(".")
    if name == "model" or name.startswith("model."):
        name = "models" + name[len("model"):]
    return name


def demo_loss_of(name):
    """Import module `name` (see module_name) and return its `demo_loss()`; errors say what to do."""
    dotted = module_name(name)
    try:
        module = importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        if exc.name and dotted.startswith(exc.name):
            raise SystemExit(
                f"cannot import {dotted!r} ({exc}). Pass a dotted module name such as models.bigram "
                "and run from the repository root (or pip install -e . first).") from None
        raise
    demo = getattr(module, "demo_loss", None)
    if demo is None:
        raise SystemExit(f"module {dotted} has no demo_loss(); every model module defines "
                         "demo_loss() -> Tensor, the scalar loss of a small fixed batch")
    loss = demo()
    if not isinstance(loss, Tensor) or loss.data.size != 1:
        raise SystemExit(f"{dotted}.demo_loss() must return a scalar Tensor, got {loss!r:.200}")
    if not loss.requires_grad:
        raise SystemExit(f"{dotted}.demo_loss() returned a tensor that does not require grad: "
                         "there is no backward graph to show")
    return dotted, loss
