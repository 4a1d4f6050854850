"""The graph below a tensor or a Value, as `viz.graph` and `viz.trace` read it: GraphWalk, ValueWalk.

`GraphWalk(root)` lists the tensors and ops reachable from `root` in the order
`Tensor.backward` visits them, gives every tensor a short label (its `.name`,
control characters written out by `visible`, or t1, t2, … numbered in the
order the forward pass made them), and records who consumes what and which
arrays the ops saved for backward. It reads the
engine's public face only (`Tensor.op`, `Tensor.inputs`, `topological_order`)
and changes nothing in the graph. `ValueWalk(root)` is the same reading of a
`Value`'s graph (v1, v2, … for unnamed Values), as far as a scalar graph has
it: the two share `root`, `order`, `tensors` and `label`, which is all the
trace and its page need.

`input_names(op, count)` and `saved_values(node)` put the names an op declares
(`input_names`, `saved_names`, beside its `rule`; a Value's op names its inputs
in its rule, ∂out/∂a) on its inputs and on what it saved, so that the picture
and the trace say what the rule says.
"""
import re

from autograd import Constant, Function, Tensor, Value, topological_order

# characters that end a line (\n, \r, U+2028), end a C string (NUL) or are no text at all (a lone surrogate)
_UNSEEN = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def visible(text):
    """`text` with its control characters, line separators and lone surrogates written as Python writes them in
    a string (\\n, \\x00, \\udcff): a name holding a newline must not make a line of its own in the trace, nor a
    NUL or an escape character cut the Graphviz source or the SVG."""
    return _UNSEEN.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def input_names(op, count):
    """A name for each of an op's `count` inputs: the ones it declares, numbered (x₁, x₂, …) when it
    declares one name for any number of inputs (concat, stack: see Function.input_labels); for a Value's op,
    the ones its rule differentiates by (∂out/∂a, ∂out/∂b: a and b)."""
    if isinstance(op, Function):
        return op.input_labels(count)
    names = re.findall(r"∂out/∂(\w+)", op.rule)
    return [names[i] if i < len(names) else f"input[{i}]" for i in range(count)]


def saved_values(node):
    """What the op that made `node` keeps for backward, by name: [(name, array)] for a Tensor, by the names
    its op declares (a slot it left empty, None, is skipped; an array it did not name, from an op defined
    outside autograd, is saved[i]; the op's own output says "(the output)" after its name);
    [("∂out/∂a", number), …] for a Value, which keeps its local derivatives."""
    op = node.op
    if isinstance(node, Value):
        return [(f"∂out/∂{name}", local) for name, local in
                zip(input_names(op, len(node.inputs)), node.local_grads)]
    names = op.saved_names

    def name(i, a):  # an op that keeps its own output (exp, tanh, relu: z) says so, as z alone does not
        named = names[i] if i < len(names) else f"saved[{i}]"
        return f"{named} (the output)" if a is node.data else named

    return [(name(i, a), a) for i, a in enumerate(op.saved or ()) if a is not None and hasattr(a, "shape")]


def grad_of(label):
    """∂L/∂ of a node's label, bracketed where the label is an expression: ∂L/∂(x1*w1 + x2*w2),
    not ∂L/∂x1*w1 + …"""
    return f"∂L/∂({label})" if re.search(r"[\s*/+\-−·]", label) else f"∂L/∂{label}"


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
            self.labels[id(t)] = visible(t.name) if t.name else f"t{counter}"
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
        return self.labels.get(id(t)) or visible(t.name or "?")

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


class ValueWalk:
    """A Value's graph below `root`, read once, as GraphWalk reads a tensor's.

    Attributes:
        root      the Value backward starts from.
        order     every Value below it, root first: `root.topological_order()`, the order Value.backward visits.
        tensors   the same Values in forward order (inputs before results), the picture's boxes (named as
                  GraphWalk's, so that node_keys and the trace read either walk).
    """

    def __init__(self, root):
        if not isinstance(root, Value):
            raise TypeError(f"expected an autograd Value, got {type(root).__name__}")
        self.root = root
        self.order = root.topological_order()
        self.tensors = self.order[::-1]
        self.labels = {id(v): visible(v.name) if v.name else f"{v.data:g}" if isinstance(v, Constant) else f"v{i}"
                       for i, v in enumerate(self.tensors, 1)}  # an unnamed constant is the number it is

    def label(self, v):
        return self.labels[id(v)]


def walk_of(root):
    """The walk for `root`'s graph: a ValueWalk for a Value, a GraphWalk for a Tensor."""
    return ValueWalk(root) if isinstance(root, Value) else GraphWalk(root)
