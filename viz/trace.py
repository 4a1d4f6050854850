"""Print `loss.backward()` step by step: each op in the order the engine runs it, its rule, its gradients.

    python -m viz.trace models.tiny             # the hand-calculable transformer's backward pass
    python -m viz.trace model.bigram --max-values 64
    python -m viz.trace models.neuron           # chapter one's Value graph, node by node
    python -m viz.trace models.bigram --double W_U   # a double backward: through the graph of ∂loss/∂W_U

    from viz.trace import trace, format_trace
    steps = trace(loss)          # a list of Step; steps.leaves holds what backward leaves in .grad
    print(format_trace(steps))

`trace` walks the backward pass with the engine's own walk
(`autograd.backward_steps`, the loop inside `Tensor.backward`): the same
order, each op's own VJP, the same reduction over broadcast axes, gradients
added in the same order, so its numbers are the engine's to the last bit.
Unlike `Tensor.backward` it writes nothing: no `.grad` is touched and no saved
array is freed, so it can run before or alongside the real backward. The
graph must still be there: trace before `backward()`, or after
`backward(retain_graph=True)`.

A `Value`'s graph is traced the same way, into the same steps: `Value.backward`'s
walk (every node in `topological_order()`, each input getting local
derivative × g, added in the same order), its numbers Python floats; what an
op "saved" is its local derivatives, ∂out/∂a for each input a. A Constant (a
data point, the 1 of x + 1) gets no gradient, as the picture draws it.

`--double [LEAF]` traces a double backward: the backward pass through the
graph of the gradient ∂loss/∂LEAF (viz.graph.gradient_of, create_graph=True),
from ½‖g‖² for a tensor's gradient g, so that LEAF receives H g; each step
says, as its module, which step of the first backward recorded its op.
"""

if __name__ == "__main__":  # before the imports below: a Ctrl-C while they load, or while the options are parsed,
    from models.interrupts import exit_quietly_on_interrupt  # ends in one line, not a traceback
    exit_quietly_on_interrupt("viz.trace")

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autograd import backend
from autograd import Constant, Tensor, Value, backward_steps, root_grad
from autograd.heatmaps import is_special

from .graph import INSTALL_DOT, LeafError, gradient_of
from .loading import ModuleError, demo_loss_of
from .numbers import number, shape_text, summary_text, values_text
from .trace_page import write_page
from .walk import GraphWalk, ValueWalk, grad_of, input_names, saved_values, visible

MAX_DECIMALS = 20  # --decimals: 17 significant digits of a value of 1e-3 need 20 places


@dataclass
class InputGrad:
    """What one step hands to one input: the gradient the engine adds into that input's total.
    (Of a Value's graph: `tensor` is a Value and `grad` a float, as in every class here.)"""
    tensor: Tensor
    label: str
    role: str                      # the input's name in the op's rule: A or B of A @ B, x, W or b of a linear
    grad: object = None            # reduced to the input's shape and dtype; None when no gradient flows
    returned_shape: tuple = None   # the shape the op returned, when the engine had to sum it back
    reason: str = ""               # why no gradient flows (a constant input)


@dataclass
class Step:
    """One op node, as backward runs it."""
    number: int                    # 1 is the op that made the loss
    name: str                      # the op's name: MatMul, Softmax, …
    scope: str                     # the module that recorded it ("" if none, and for a Value)
    rule: str                      # the local rule the op applies (its `rule` label)
    op: object                     # the Function itself (the output's `.op`; a Value's (name, rule) pair)
    output: Tensor
    output_label: str
    grad: object                   # g: the gradient of the loss with respect to the output
    contributions: int             # how many ops added into g (a tensor used twice gets two)
    inputs: list = field(default_factory=list)  # one InputGrad per input, in the op's input order
    saved: list = field(default_factory=list)   # (name, array): the forward values the op saved, by its names
    #                                               (a Value's: ("∂out/∂a", float), its local derivatives)


@dataclass
class LeafGrad:
    """A leaf's gradient from this backward: what the engine adds into its `.grad`."""
    tensor: Tensor
    label: str
    grad: object
    contributions: int


class Trace(list):
    """The steps of a backward pass, in order; `.leaves` lists the leaves' gradients as they are reached."""

    def __init__(self, steps, root, root_label, leaves):
        super().__init__(steps)
        self.root, self.root_label, self.leaves = root, root_label, leaves


def trace(root, grad=None):
    """The backward pass from `root` (a Tensor or a Value), step by step, without writing any `.grad`
    (see the module's docstring)."""
    if isinstance(root, Value):
        if grad is not None:
            raise TypeError("trace: a Value's backward starts from ∂L/∂L = 1; grad= is for a non-scalar Tensor")
        walk, walked, label = ValueWalk(root), _value_steps(root), None
    elif isinstance(root, Tensor):
        itself = grad is root.data and root.data.size > 1
        grad = root_grad(root, grad, "trace")
        walk = GraphWalk(root)
        # seeded with its own values, the backward is L = ½‖root‖²'s (--double's ½‖g‖²): the header says so
        label = f"½‖{walk.label(root)}‖²" if itself else None
        if walk.freed:
            raise RuntimeError(
                f"trace: the graph through {type(walk.freed[0]).__name__} was freed by an earlier backward(); "
                "trace before calling backward(), or call backward(retain_graph=True)")
        # The engine's own backward walk, recording each step instead of writing .grad or freeing anything.
        walked = backward_steps(root, grad, free=False)
    else:
        raise TypeError(f"trace: expected an autograd Tensor or Value, got {type(root).__name__}")

    arrivals = {id(root): 1}
    steps, leaves = [], []
    for t, g, sent in walked:
        if t.op is None:
            leaves.append(LeafGrad(t, walk.label(t), _leaf_grad(t, g), arrivals[id(t)]))
            continue
        scope = visible(t.op.scope) if isinstance(t, Tensor) else ""
        step = Step(len(steps) + 1, t.op.name, scope, t.op.rule, t.op, t, walk.label(t), g,
                    arrivals[id(t)], saved=saved_values(t))
        for (x, xg, returned), role in zip(sent, input_names(t.op, len(sent))):
            if xg is None:
                constant = isinstance(x, Constant) if isinstance(x, Value) else not x.requires_grad
                reason = "constant: needs no gradient" if constant else "the op returned none"
                step.inputs.append(InputGrad(x, walk.label(x), role, reason=reason))
                continue
            arrivals[id(x)] = arrivals.get(id(x), 0) + 1
            step.inputs.append(InputGrad(x, walk.label(x), role, xg,
                                         None if returned in (None, np.shape(x.data)) else returned))
        steps.append(step)
    return Trace(steps, root, label or walk.label(root), leaves)


def _value_steps(root):
    """Value.backward's walk, written down instead of stored: (v, g, sent) as backward_steps yields them, the
    gradients added in Value.backward's order (sent: (input, local derivative × g, None) per input). A Constant
    is left out as backward_steps leaves out a tensor that needs no gradient (sent: (it, None, None)), and as
    viz.graph draws it: Value.backward writes its .grad, but nothing reads it."""
    grads = {id(root): 1.0}
    for v in root.topological_order():  # every consumer of v comes before v: its g is complete
        g = grads.get(id(v))
        if g is None:  # a Constant
            continue
        sent = [(x, None if isinstance(x, Constant) else local * g, None)
                for x, local in zip(v.inputs, v.local_grads)]
        for x, xg, _ in sent:
            if xg is not None:
                grads[id(x)] = grads.get(id(x), 0.0) + xg  # Value.backward's child.grad += local * v.grad, from 0
        yield v, g, sent


def _leaf_grad(leaf, g):
    """A leaf's gradient as backward stores it: a Value's float; for a tensor, as Tensor.backward's _accumulate
    stores it, an array of the leaf's dtype (NumPy ops on 0-d arrays may hand back a scalar)."""
    if isinstance(leaf, Value):
        return g
    return backend.xp_for(leaf.device).asarray(g, dtype=leaf.data.dtype)


def _array_lines(array, indent, max_values, decimals):
    """`shape: values` for a small array, `shape: ‖·‖ = …` for a large one (see summary_text); a Value's
    number (a float) as the number alone."""
    if isinstance(array, float):
        return [values_text(array, decimals)]
    shape = "scalar" if array.ndim == 0 else shape_text(array.shape)
    if array.size > max_values:
        return [f"{shape}  {summary_text(array)}"]
    text = values_text(array, decimals)
    if "\n" not in text and len(text) <= 80:
        return [f"{shape}  {text}"]
    return [shape] + [" " * indent + line for line in text.splitlines()]


def format_trace(steps, max_values=16, decimals=6):
    """The trace as text, one block per step; arrays with more than `max_values` values show as shape and norm."""
    loss = steps.root_label
    lines = []
    kind = type(steps.root).__name__
    value = f" = {values_text(steps.root.data, decimals)}" if np.size(steps.root.data) == 1 else ""
    lines.append(f"Backward pass of L = {loss}{value}, step by step as {kind}.backward runs it.")
    if kind == "Value":
        lines.append("Each step is one op. g = ∂L/∂(the op's output); each input gets g × its local derivative,")
        lines.append("which the op saved (its rule says which). A Value used twice adds up both contributions.")
    else:
        lines.append("Each step is one op. g = ∂L/∂(the op's output); "
                     "the op's rule turns g into ∂L/∂(each input),")
        lines.append("summed back over broadcast axes. A tensor used by several ops adds up their contributions.")
    width = len(str(len(steps)))
    parts = {id(leaf.tensor): leaf.contributions for leaf in steps.leaves}  # of each node's sum, as the page counts
    parts.update({id(s.output): s.contributions for s in steps})
    arrived = {}
    for s in steps:
        lines.append("")
        where = f"   [{s.scope}]" if s.scope else ""
        lines.append(f"step {s.number:>{width}}/{len(steps)}  {s.name}{where}")
        lines.append(f"  rule  {s.rule}")
        for n, (name, array) in enumerate(s.saved):
            head = f"  {'uses' if n == 0 else '    '}  {name} = "
            body = _array_lines(array, len(head), max_values, decimals)
            lines.append(head + body[0])
            lines.extend(body[1:])
        summed = f"   (sum of {s.contributions} contributions)" if s.contributions > 1 else ""
        head = f"  g     {grad_of(s.output_label)}  "
        body = _array_lines(s.grad, len(head), max_values, decimals)
        lines.append(head + body[0] + summed)
        lines.extend(body[1:])
        for n, inp in enumerate(s.inputs):
            prefix = "  out   " if n == 0 else "        "
            if inp.grad is None:
                lines.append(f"{prefix}{inp.label}: {inp.reason}")
                continue
            head = f"{prefix}{grad_of(inp.label)}  "
            body = _array_lines(inp.grad, len(head), max_values, decimals)
            arrived[id(inp.tensor)] = arrived.get(id(inp.tensor), 0) + 1
            notes = [f"summed from {shape_text(inp.returned_shape)} over broadcast axes"
                     if inp.returned_shape is not None else "",
                     f"part {arrived[id(inp.tensor)]} of {parts[id(inp.tensor)]} of its sum"
                     if parts.get(id(inp.tensor), 1) > 1 else ""]
            note = f"   ({', '.join(n for n in notes if n)})" if any(notes) else ""
            lines.append(head + body[0] + note)
            lines.extend(body[1:])
    lines.append("")
    lines.append("Leaves: the gradients backward adds into .grad")
    for leaf in steps.leaves:
        summed = f"   (sum of {leaf.contributions} contributions)" if leaf.contributions > 1 else ""
        head = f"  {leaf.label}.grad  "
        body = _array_lines(leaf.grad, len(head), max_values, decimals)
        lines.append(head + body[0] + summed)
        lines.extend(body[1:])
    return "\n".join(lines)


def print_trace(root, max_values=16, decimals=6, file=None, grad=None):
    """Trace the backward pass from `root` (a Tensor or a Value; `grad` as in trace) and print it."""
    print(format_trace(trace(root, grad), max_values, decimals), file=file or sys.stdout)


def main(argv=None):
    from models.cli import Parser  # here, not at the top: trace() needs nothing from models
    from models.doors import stdout_reader_left
    from models.training.checkpoint import picture_file
    p = Parser("python -m viz.trace", "Print the backward pass of a model module's demo_loss(), one op at a time, "
                                      "in the order the engine runs it.")
    p.add_argument("module", help="a module defining demo_loss(), e.g. models.tiny (model.tiny works too)")
    p.add_argument("--max-values", type=int, default=16, metavar="N",
                   help="print the values of arrays with at most N elements, shape and norm otherwise")
    p.add_argument("--decimals", type=int, default=6, metavar="D",
                   help=f"round values to D decimals (at most {MAX_DECIMALS})")
    p.add_argument("--html", metavar="PATH", type=picture_file,
                   help="write one self-contained page that steps through backward on the graph's picture "
                        "(default: none, the text trace only)")
    p.add_argument("--double", nargs="?", const="", metavar="LEAF",
                   help="trace a double backward, through the graph of g = ∂loss/∂LEAF built with "
                        "create_graph=True: the backward of ½‖g‖² for a Tensor's g (LEAF receives H g), of g itself "
                        "for a Value's (default: none, the loss's backward; LEAF left out: the first named leaf)")
    args = p.parse_args(argv)
    if args.max_values < 0:
        p.error(f"--max-values must be at least 0, got {args.max_values}")
    if args.decimals < 0:
        p.error(f"--decimals must be at least 0, got {args.decimals}")
    if args.decimals > MAX_DECIMALS:
        p.error(f"--decimals must be at most {MAX_DECIMALS} (past that, a float64's 17 significant digits "
                f"are used up), got {args.decimals}")
    # HTML in x.png opens nowhere; a device or a pipe (/dev/null) is written in place, whatever its name
    if args.html and Path(args.html).suffix.lower() not in (".html", ".htm") and not is_special(args.html):
        p.error(f"--html {args.html}: the page is HTML; name it with .html or .htm")
    if args.html and shutil.which("dot") is None:
        p.error(f"--html draws the graph, which needs Graphviz's `dot`: {INSTALL_DOT}")
    try:
        name, loss = demo_loss_of(args.module)
    except ModuleError as exc:
        print(f"viz.trace: error: {exc}", file=sys.stderr)
        return 1
    grad, what = None, f"{name}.demo_loss() = {number(float(loss.data), 6)} · backward, step by step"
    if args.double is not None:
        try:
            loss = gradient_of(loss, args.double or None)
        except LeafError as exc:
            print(f"viz.trace: error: --double: {exc}", file=sys.stderr)
            return 1
        grad = loss.data if isinstance(loss, Tensor) else None  # ½‖g‖²: the leaf receives H g
        what = f"{loss.name} of {name}.demo_loss() (create_graph=True) · its backward, step by step"
    if args.html:
        try:
            write_page(trace(loss, grad), Path(args.html), what, args.max_values, args.decimals)
        except OSError as exc:
            if stdout_reader_left(exc):  # `--html /dev/stdout | head` has read enough
                raise
            print(f"viz.trace: error: cannot write {args.html}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        print(f"wrote {args.html}: open it in a browser; ← and → step through backward")
        return 0
    print_trace(loss, args.max_values, args.decimals, grad=grad)  # `| head` closing the pipe: run_main
    return 0


if __name__ == "__main__":
    from models.doors import run_main
    sys.exit(run_main(main, "viz.trace"))
