"""Draw the backward graph: which ops `loss.backward()` runs, the rule each applies, what it saved.

    from viz.graph import draw
    draw(loss)                            # a graphviz.Digraph; Jupyter shows it inline
    draw(loss, collapse=True, depth=3)    # one box per module, only the 3 ops nearest the loss

    python -m viz.graph models.bigram                 # writes graph_bigram.svg
    python -m viz.graph model.tiny --format png --out tiny.png
    python -m viz.graph models.gpt2 --collapse        # a box per transformer block
    python -m viz.graph models.tiny --flow E          # each part's share of a summed gradient, the path to E
    python -m viz.graph models.bigram --double W_U    # the gradient ∂loss/∂W_U, drawn as a graph of its own

Tensors are boxes (name, shape, and the "grad norm", the L2 norm of the
gradient backward left there: in words, as the default fonts of PNGs draw ‖g‖
like "llgll"); ops are rounded boxes with the op's name and, smaller, its
local rule: how it turns the gradient of its output into gradients of its inputs.
Arrows point the way gradients flow, from the loss down to the parameters.
A legend on the picture explains the colours.

The command runs the module's `demo_loss()`, asks every intermediate tensor
to keep its gradient (`retain_grad()`), runs `backward(retain_graph=True)` so
the norms can be shown (`--no-backward` draws the graph before it), and
renders with Graphviz's `dot`. Without `dot` on PATH it writes the `.dot`
source instead, prints how to install Graphviz, and exits with status 3.

With `--flow` (draw(flow=...)), every arrow that brings one part of a summed
gradient says the part's share ⟨part, total⟩/‖total‖² (viz/flow.py), and
`--flow LEAF` draws in red the path from the loss to LEAF that takes the part
with the largest share at every sum; collapsed, each transformer block's
arrow into its input splits that gradient into skip, attention and MLP.

`--double [LEAF]` draws the gradient ∂loss/∂LEAF built with create_graph=True
instead: backward's own ops (a box per step of backward, named after the op
whose VJP recorded them) over the forward's, with the gradients of that
graph's own backward in its boxes: of ½‖g‖² for a tensor's gradient g (so
LEAF's box shows H g, a Hessian-vector product), of g itself for a Value's.
"""

if __name__ == "__main__":  # before the imports below: a Ctrl-C while they load, or while the options are parsed,
    from models.interrupts import exit_quietly_on_interrupt  # ends in one line, not a traceback
    exit_quietly_on_interrupt("viz.graph")

import functools
import html
import inspect
import shutil
import sys
from collections import Counter, deque
from pathlib import Path

import numpy as np

import autograd as ag
from autograd import Constant, Function, Value, backend
from models.io import atomic_path

from .flow import Flow, inside, shares_text
from .loading import ModuleError, demo_loss_of
from .numbers import fixed, host, norm, number, shape_text
from .walk import GraphWalk, ValueWalk, input_names, visible, walk_of

INSTALL_PYTHON = 'pip install -e ".[viz]"  (or: pip install graphviz)'
INSTALL_DOT = ("install Graphviz, which provides `dot`: sudo apt-get install graphviz (Debian/Ubuntu), "
               "brew install graphviz (macOS), conda install graphviz, or see https://graphviz.org/download/")
NO_DOT_EXIT = 3  # the .dot source was written, but not the picture asked for
FORMATS = ("svg", "png", "pdf", "dot")  # what --format takes, and the suffixes --out may have

# One colour per kind of node; the legend on every picture spells them out.
LOSS = ("#f9c6c4", "#b03a2e")          # fill, border
PARAMETER = ("#cdebc5", "#2e7d32")
INTERMEDIATE = ("#ffffff", "#5f6b73")
CONSTANT = ("#eeeeee", "#9e9e9e")
OP = ("#d9e5fb", "#3b5b92")
MODULE = ("#e8ddf5", "#6a4c93")
SAVED = "#ef8a00"                      # the thick border of a tensor whose data an op keeps
HIGHLIGHT = "#d62728"                  # the border of a node a caller points at (draw(highlight=...))
SHARE = "#b35c00"                      # a part's share of a summed gradient, on its arrow (draw(flow=...))
NONFINITE = ("#fde0dd", HIGHLIGHT)     # a tensor whose data holds NaN or inf
MUTED = "#5a5a5a"
FONT = "Helvetica,Arial,sans-serif"
SMALL = 16                             # a tensor of at most this many elements shows its values


def _graphviz():
    try:
        import graphviz
    except ImportError:
        raise ImportError(f"drawing the graph needs the Python package `graphviz`: {INSTALL_PYTHON}; "
                          f"rendering pictures also needs the Graphviz program: {INSTALL_DOT}") from None
    return graphviz


def dot_text(text):
    """`text` as Graphviz is to draw it, letter for letter, in a label, HTML-like or plain (a title, a module's
    frame): & < > as entities, which both kinds decode, and each backslash doubled, or \\N would draw the node's
    name and \\l end the line; control characters as walk.visible writes them, or they cut the source or the SVG."""
    return html.escape(visible(text), quote=False).replace("\\", "\\\\")


def _small(text, size=9, color=MUTED):
    return f'<FONT POINT-SIZE="{size}" COLOR="{color}">{dot_text(text)}</FONT>'


def _bytes(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


class _Node:
    """A node to draw; `legend` names the legend rows it needs (only those the picture holds are listed)."""

    def __init__(self, kind, label, attrs, cluster="", legend=()):
        self.kind, self.label, self.attrs, self.cluster = kind, label, attrs, cluster
        self.legend = set(legend)


class _Picture:
    """The graph to draw, before Graphviz: nodes by key, and edges in the direction gradients flow."""

    def __init__(self):
        self.nodes = {}
        self.edges = {}  # (from, to, slot) -> edge attributes, in insertion order
        self.rep = {}  # a drawn node's key -> the box it folded into (collapse), where it did

    def edge(self, a, b, attrs, slot=0):
        """Add a → b once per slot; when folding merges a no-gradient edge with a gradient one, the gradient wins.

        slot: which input of an op the arrow reaches; an op that reads a tensor twice (x*x) sends it two parts
        of its gradient, so it gets an arrow for each (slot 1 is x's second read), each with its own label."""
        key = (a, b, slot)
        if a != b and (key not in self.edges or not attrs and self.edges[key] is _NO_GRAD_EDGE):
            self.edges[key] = attrs


def _values_rows(word, array):
    """'data [0.5, 0.8]' for a small array, one line per row of its last axis, numbers to 4 digits."""
    a = host(array)
    rows = a.reshape(1, -1) if a.ndim < 2 else a.reshape(-1, a.shape[-1])

    def text(x):
        return str(int(x)) if a.dtype.kind in "iub" else number(float(x))

    if a.ndim == 0:
        return [f"{word} {text(a)}"]
    return [f"{word if i == 0 else ' ' * len(word)} [{', '.join(text(x) for x in row)}]" for i, row in enumerate(rows)]


def _values_lines(word, array, color="#1f1f1f"):
    return [_small(line, 9, color) for line in _values_rows(word, array)]


GRAD = "#1f3c6e"  # the colour of a gradient's values


def grad_rows(node, grad, word="grad"):
    """A gradient as the box of `node` shows it, in plain lines: a Value's to 4 decimals ('grad 0.5000'; a tiny
    one 'grad 4.50e-07', never 0.0000), a tensor's values when it has at most SMALL elements ('grad [0.5, -1]', a
    line per row), its norm otherwise ('grad norm = 2.5'). `word` stands where 'grad' does (the trace page writes
    how many parts of a sum have arrived there)."""
    if isinstance(node, Value):  # a Value's grad is a Value itself after backward(create_graph=True)
        return [f"{word} {fixed(grad.data if isinstance(grad, Value) else grad, 4)}"]
    if node.data.size <= SMALL:
        return _values_rows(word, grad)
    return [f"{word} norm = {number(norm(grad))}"]


def _grad_line(t, walk):
    if not t.requires_grad:
        return _small("constant · no gradient")
    if t.grad is not None:
        return _small(f"grad norm = {number(norm(t.grad))}", color="#1f1f1f")
    if not walk.backward_ran():
        return _small("no grad yet — backward not run", color="#a23b2a")
    if not t.is_leaf:
        return _small("grad not kept (retain_grad())")
    return _small("no grad reached it")


def _tensor_node(t, walk, cluster, grads=None):
    """Name, shape, and the gradient: values for at most SMALL elements (data too), the norm for more;
    `grads(t)`, when given, are the gradient's lines instead (see draw)."""
    name = walk.label(t)
    lines = [f"<B>{dot_text(name)}</B>" if t.name else f"<I>{dot_text(name)}</I>"]
    small = t.data.size <= SMALL
    if t.data.size == 1 and t.data.ndim <= 1:
        value = float(host(t.data).ravel()[0])
        lines.append(_small(f"{'scalar' if t.ndim == 0 else shape_text(t.shape)} = {number(value, 5)}", 10, "#1f1f1f"))
    else:
        dtype = "" if t.dtype.kind == "f" and t.dtype.itemsize == 4 else f" {t.dtype}"
        lines.append(_small(f"{shape_text(t.shape)}{dtype}", 10, "#1f1f1f"))
        if small:
            lines += _values_lines("data", t.data)
    bad = _nonfinite_line(t.data)
    if bad:
        lines.append(_small(bad, 10, HIGHLIGHT))
    legend = set()
    if grads is not None and t.requires_grad:
        lines += [_small(line, 9, GRAD) for line in grads(t)]
        legend.add("values" if small else "norm")
    elif small and t.grad is not None:
        lines += _values_lines("grad", t.grad, GRAD)
        legend.add("values")
    else:
        lines.append(_grad_line(t, walk))
        legend.add("values" if small and t.data.size > 1 else "norm" if t.grad is not None else "")
    if bad:
        kind_legend, (fill, border) = "non-finite", NONFINITE
    elif t is walk.root:  # a gradient drawn as a graph (--double) is not a loss: its backward starts from a seed
        kind_legend, (fill, border) = ("loss", LOSS) if t.data.size == 1 else ("top", LOSS)
    elif not t.requires_grad:
        kind_legend, (fill, border) = "constant", CONSTANT
    elif t.is_leaf:
        kind_legend, (fill, border) = "parameter", PARAMETER
    else:
        kind_legend, (fill, border) = "tensor", INTERMEDIATE
    legend.add(kind_legend)
    attrs = {"shape": "box", "style": "filled", "fillcolor": fill, "color": border, "penwidth": "1.2"}
    if not t.requires_grad:
        attrs["style"] = "filled,dashed"
    if walk.is_saved(t):
        attrs.update(color=SAVED, penwidth="3")
        legend.add("saved")
    attrs["tooltip"] = _tooltip(_tensor_tooltip(t, walk, name))
    kind = "constant" if not t.requires_grad else "tensor"
    return _Node(kind, "<" + "<BR/>".join(lines) + ">", attrs, cluster, legend - {""})


def _nonfinite_line(array):
    """'148 NaN · 620 inf of 768' for an array holding NaN or inf; "" for a finite one."""
    a = host(array)
    if a.dtype.kind != "f":
        return ""
    nan = int(np.isnan(a).sum())
    inf = int(np.isinf(a).sum())
    return f"{nan:,} NaN · {inf:,} inf of {a.size:,}" if nan or inf else ""


def _constant_node(name, array, cluster):
    """Data an op was given outside the graph (targets, ids, a mask): no gradient flows into it."""
    lines = [f"<B>{dot_text(name)}</B>",
             _small(f"{shape_text(array.shape)} {array.dtype}", 10, "#1f1f1f")]
    if array.size <= SMALL:
        lines += _values_lines("", array)
    lines.append(_small("constant · no gradient"))
    attrs = {"shape": "box", "style": "filled,dashed", "fillcolor": CONSTANT[0], "color": CONSTANT[1],
             "tooltip": _tooltip(f"{name}: data the op was given; no gradient flows into it")}
    return _Node("constant", "<" + "<BR/>".join(lines) + ">", attrs, cluster, {"constant"})


def _tooltip(text):
    """Hover text for SVG viewers, its lines joined by DOT's \\n: & < > as entities, and each backslash written
    four times, as Graphviz reads a tooltip's escapes (\\N, the node's name) twice over."""
    return html.escape(text, quote=False).replace("\\", "\\" * 4).replace("\n", "\\n")


def _tensor_tooltip(t, walk, name):
    """What an SVG viewer shows on hover: the tensor's role in words."""
    if t is walk.root:
        role = "the loss: backward starts here with ∂L/∂L = 1"
    elif not t.requires_grad:
        role = "a constant: no gradient flows into it"
    elif t.is_leaf:
        role = "a leaf (parameter): backward adds ∂L/∂" + name + " into its .grad"
    else:
        role = f"made by {t.op.name}; ∂L/∂{name} flows on into that op's inputs"
    lines = [f"{name}: {shape_text(t.shape)} {t.dtype}", role]
    keepers = walk.saved_by(t)
    if keepers:
        lines.append("kept for backward by " + ", ".join(op.name for op in keepers))
    return "\n".join(lines)


def _constants(op):
    """The arrays an op was given as keyword data, not as tensors: [(name, array)], e.g. targets, ids, masks."""
    return [(name, value) for name, value in (op.params or {}).items() if backend.device_of(value) is not None]


def _reduction_note(op):
    """For a mean over rows (cross-entropy's default): "mean over B rows: × 1/B"; otherwise ""."""
    params = op.params or {}
    if op.name != "CrossEntropy" or params.get("reduction") != "mean":  # also when backward freed params
        return ""
    targets = params["targets"]
    ignore = params.get("ignore_index")
    rows = int(targets.size if ignore is None else (targets != ignore).sum())
    return f"mean over {rows} row{'s' if rows != 1 else ''}: × 1/{rows}"


def _edge_labels(op, count):
    """What the arrows from an op to its `count` inputs say: their names, unless the op has one input
    with the generic name x (a label there would say nothing)."""
    names = input_names(op, count)
    return names if count > 1 or tuple(names) != Function.input_names else [""] * count


def _saved_line(arrays):
    if not arrays:
        return None
    nbytes = sum(int(a.nbytes) for a in arrays)
    return _small(f"saves {len(arrays)} array{'s' if len(arrays) > 1 else ''} · {_bytes(nbytes)}", 8, SAVED)


def _op_node(op, walk):
    lines = [f"<B>{dot_text(op.name)}</B>"]
    if op.rule:
        lines.append(_small(op.rule, 9, "#1f3c6e"))
    note = _reduction_note(op)
    if note:
        lines.append(_small(note, 9, "#1f3c6e"))
    saved = _saved_line(walk.saved(op))
    if saved:
        lines.append(saved)
    doc = inspect.cleandoc(type(op).__doc__ or op.name)
    tooltip = (f"recorded in {visible(op.scope)}\n\n" if op.scope else "") + doc
    attrs = {"shape": "box", "style": "rounded,filled", "fillcolor": OP[0], "color": OP[1],
             "tooltip": _tooltip(tooltip)}
    return _Node("op", "<" + "<BR/>".join(lines) + ">", attrs, op.scope, {"op"})


def node_keys(walk):
    """The Graphviz node names (an SVG's <title>s) of a GraphWalk's or a ValueWalk's nodes, by id: of the
    tensors t1, t2, … (Values v1, v2, …) in forward order, and of each op, by the id of the node it made,
    op1, op2, … in the order backward runs them."""
    prefix = "v" if isinstance(walk, ValueWalk) else "t"  # t7 is the tensor labelled t7 if unnamed; so for v7
    tkey = {id(t): f"{prefix}{i}" for i, t in enumerate(walk.tensors, 1)}
    okey = {id(t): f"op{i}" for i, t in enumerate((t for t in walk.order if t.op is not None), 1)}
    return tkey, okey


def _expanded(walk, grads=None):
    """Every tensor and op, each op in the (nested) cluster of the module that recorded it."""
    pic = _Picture()
    tkey, by_output = node_keys(walk)
    okey = {id(op): by_output[id(walk.output_of[id(op)])] for op in walk.ops}
    for t in walk.tensors:
        if t.op is not None:
            cluster = t.op.scope
        else:  # a leaf sits with the module that uses it, when only one does
            scopes = {getattr(c, "scope", "") or "" for c in walk.consumers.get(id(t), ())}
            cluster = scopes.pop() if len(scopes) == 1 else ""
        pic.nodes[tkey[id(t)]] = _tensor_node(t, walk, cluster, grads)
    for op in walk.ops:
        out = walk.output_of[id(op)]
        pic.nodes[okey[id(op)]] = _op_node(op, walk)
        pic.edge(tkey[id(out)], okey[id(op)], {})
        reads = Counter()  # how often the op has read each input so far: a repeated input gets its own arrow
        for x, role in zip(out.inputs, _edge_labels(op, len(out.inputs))):
            attrs = dict(_NO_GRAD_EDGE) if not x.requires_grad else {}
            if role:
                attrs.update(label=role, fontsize="10", fontcolor=OP[1])
            pic.edge(okey[id(op)], tkey[id(x)], attrs, reads[id(x)])
            reads[id(x)] += 1
        for i, (name, array) in enumerate(_constants(op)):
            key = f"{okey[id(op)]}c{i}"
            pic.nodes[key] = _constant_node(name, array, op.scope)
            pic.edge(okey[id(op)], key, _NO_GRAD_EDGE)
    for i, op in enumerate(walk.freed):
        note = f"freed{i}"
        text = "<BR/>".join(_small(line, 9, "#a23b2a") for line in (
            "inputs freed by backward():", "call backward(retain_graph=True)", "to keep the graph"))
        pic.nodes[note] = _Node("note", f"<{text}>", {"shape": "note", "color": "#a23b2a"},
                                pic.nodes[okey[id(op)]].cluster)
        pic.edge(okey[id(op)], note, {"style": "dotted"})
    return pic, tkey, okey


_NO_GRAD_EDGE = {"style": "dashed", "color": CONSTANT[1], "arrowhead": "none"}


def _module_of(scope, collapse, all_scopes):
    """The module box an op of `scope` folds into, or None to keep the op as it is.

    collapse=N keeps the first N dotted parts ("transformer.h.0.attn", 3 -> "transformer.h.0").
    collapse=True folds a numbered module's insides into it ("transformer.h.0.attn.c_attn" ->
    "transformer.h.0", one box per transformer block); any other scope folds into its outermost
    enclosing scope that records ops of its own ("block.attn" -> "block"), unless that one holds
    numbered blocks or everything: one box for the whole model shows nothing.
    """
    if not scope:
        return None
    parts = scope.split(".")
    if collapse is not True:
        return ".".join(parts[:collapse])
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[:i + 1])
    for i in range(1, len(parts)):
        prefix = ".".join(parts[:i])
        if prefix in all_scopes and not _too_wide(prefix, all_scopes):
            return prefix
    return scope


def _too_wide(prefix, all_scopes):
    inside = [s for s in all_scopes if s.startswith(prefix + ".")]
    holds_blocks = any(part.isdigit() for s in inside for part in s.split("."))
    return holds_blocks or len(inside) == len(all_scopes) - 1


def _collapsed(walk, pic, tkey, okey, collapse):
    """Fold the ops of each module, the tensors that never leave it, and its own parameters into one box."""
    all_scopes = {op.scope for op in walk.ops} - {""}
    by_scope = {s: _module_of(s, collapse, all_scopes) for s in all_scopes | {""}}
    module = {id(op): by_scope[op.scope] for op in walk.ops}

    def tensor_home(t):
        if t is walk.root:
            return None
        users = {module[id(c)] for c in walk.consumers.get(id(t), ())}
        if t.op is not None:
            users.add(module[id(t.op)])
        return users.pop() if len(users) == 1 else None

    keys = {m: f"module{i}" for i, m in enumerate(dict.fromkeys(m for m in module.values() if m), 1)}
    rep, contents = {}, {}
    for op in walk.ops:
        m = module[id(op)]
        rep[okey[id(op)]] = keys[m] if m else okey[id(op)]
        if m:
            contents.setdefault(m, {"ops": [], "params": []})["ops"].append(op)
    for t in walk.tensors:
        m = tensor_home(t)
        rep[tkey[id(t)]] = keys[m] if m else tkey[id(t)]
        if m and t.is_leaf and t.requires_grad:
            contents[m]["params"].append(t)
    for op in walk.ops:  # an op's targets, ids or mask fold into the module the op folds into
        for i, _ in enumerate(_constants(op)):
            if module[id(op)]:
                rep[f"{okey[id(op)]}c{i}"] = rep[okey[id(op)]]

    folded = _Picture()
    for key, node in pic.nodes.items():
        if rep.get(key, key) == key:
            node.cluster = ""
            folded.nodes[key] = node
    for m, c in contents.items():
        folded.nodes[keys[m]] = _module_node(m, c, walk)
    for (a, b, slot), attrs in pic.edges.items():
        ra, rb = rep.get(a, a), rep.get(b, b)
        folded.edge(ra, rb, attrs, slot if (ra, rb) == (a, b) else 0)  # arrows into a module box fold into one
    folded.rep = rep
    return folded


def _wrap(text, width=52):
    """Break a comma-separated list into lines of about `width` characters."""
    lines = [""]
    for item in text.split(", "):
        if lines[-1] and len(lines[-1]) + len(item) + 2 > width:
            lines[-1] += ","
            lines.append(item)
        else:
            lines[-1] = f"{lines[-1]}, {item}" if lines[-1] else item
    return lines


def _module_node(name, contents, walk):
    counts = Counter(op.name for op in reversed(contents["ops"]))  # forward order
    ops = ", ".join(name if n == 1 else f"{name} ×{n}" for name, n in counts.items())
    n_ops = len(contents["ops"])
    lines = [f"<B>{dot_text(name)}</B>"]
    lines += [_small(line, 9, "#1f1f1f") for line in _wrap(f"{n_ops} op{'s' if n_ops > 1 else ''}: {ops}")]
    params = sorted(contents["params"], key=walk.label)
    for t in params[:6]:
        label = walk.label(t)
        label = label[len(name) + 1:] if label.startswith(name + ".") else label
        grad = f"  grad norm = {number(norm(t.grad))}" if t.grad is not None else ""
        lines.append(_small(f"{label} {shape_text(t.shape)}{grad}", 9, PARAMETER[1]))
    if len(params) > 6:
        lines.append(_small(f"… and {len(params) - 6} more parameters", 9, PARAMETER[1]))
    saved = _saved_line([a for op in contents["ops"] for a in walk.saved(op)])
    if saved:
        lines.append(saved)
    # box3d draws its depth inside the node's outline, over the label's first line: a wider margin keeps them apart
    attrs = {"shape": "box3d", "style": "filled", "fillcolor": MODULE[0], "color": MODULE[1], "margin": "0.2,0.15"}
    return _Node("module", "<" + "<BR/>".join(lines) + ">", attrs, legend={"module"})


def _limit_depth(pic, root_key, depth):
    """Keep what lies within `depth` op hops of the loss; mark where the graph goes on."""
    hops = {root_key: 0}
    queue = deque([root_key])
    out = {}
    for a, b, _ in pic.edges:
        out.setdefault(a, []).append(b)
    while queue:  # 0-1 breadth-first search: entering an op (or module) costs one hop
        a = queue.popleft()
        for b in out.get(a, ()):
            cost = 1 if pic.nodes[b].kind in ("op", "module") else 0
            if b not in hops or hops[a] + cost < hops[b]:
                hops[b] = hops[a] + cost
                (queue.appendleft if cost == 0 else queue.append)(b)
    keep = {k for k, h in hops.items() if h <= depth}
    kept = _Picture()
    kept.rep = pic.rep
    for key in pic.nodes:
        if key in keep:
            kept.nodes[key] = pic.nodes[key]
    for (a, b, slot), attrs in pic.edges.items():
        if a in keep and b in keep:
            kept.edge(a, b, attrs, slot)
    for a in list(kept.nodes):
        cut = [b for b in out.get(a, ()) if b not in keep]
        if cut:
            more = f"more_{a}"
            kept.nodes[more] = _Node("more", "⋯ earlier ops", {
                "shape": "plaintext", "fontcolor": MUTED, "fontsize": "9"}, kept.nodes[a].cluster)
            kept.edge(a, more, {"style": "dotted", "color": MUTED})
    return kept


def _legend_row(swatch, text, cell):
    return (f'<TR><TD {cell} WIDTH="78">{swatch}</TD>'
            f'<TD ALIGN="LEFT" BORDER="0">{_small(text, 9, "#1f1f1f")}</TD></TR>')


# Every row a legend can hold, in the order it lists them; a picture's legend keeps those its nodes need.
LEGEND = {
    "loss": ("loss", "where backward starts: ∂L/∂L = 1", f'BGCOLOR="{LOSS[0]}" COLOR="{LOSS[1]}"'),
    "top": ("top", "the tensor drawn from: the graph below it", f'BGCOLOR="{LOSS[0]}" COLOR="{LOSS[1]}"'),
    "non-finite": ("NaN / inf", "a tensor whose data holds NaN or inf (counted in its box)",
                   f'BGCOLOR="{NONFINITE[0]}" COLOR="{NONFINITE[1]}"'),
    "output": ("output", "where backward starts: grad = 1", f'BGCOLOR="{LOSS[0]}" COLOR="{LOSS[1]}"'),
    "parameter": ("parameter", "leaf: backward leaves its gradient in .grad",
                  f'BGCOLOR="{PARAMETER[0]}" COLOR="{PARAMETER[1]}"'),
    "leaf": ("leaf", "an input: backward adds its gradient into .grad",
             f'BGCOLOR="{PARAMETER[0]}" COLOR="{PARAMETER[1]}"'),
    "tensor": ("tensor", "intermediate result of an op", f'BGCOLOR="{INTERMEDIATE[0]}" COLOR="{INTERMEDIATE[1]}"'),
    "computed": ("value", "computed by an op", f'BGCOLOR="{INTERMEDIATE[0]}" COLOR="{INTERMEDIATE[1]}"'),
    "constant": ("constant", "input that needs no gradient (data, targets, ids)",
                 f'BGCOLOR="{CONSTANT[0]}" COLOR="{CONSTANT[1]}"'),
    "op": ("Op<BR/>" + _small("rule", 8), "op + its local rule: grad of output → grads of inputs",
           f'BGCOLOR="{OP[0]}" COLOR="{OP[1]}"'),
    "value op": ("op<BR/>" + _small("∂out/∂in", 8), "op + its local derivatives; the arrow to each input "
                 "says × what", f'BGCOLOR="{OP[0]}" COLOR="{OP[1]}"'),
    "saved": ("saved", "orange border: data an op keeps for backward", f'BORDER="3" COLOR="{SAVED}"'),
    "module": ("module", "a module folded into one box", f'BGCOLOR="{MODULE[0]}" COLOR="{MODULE[1]}"'),
    "marked": ("marked", "thick red border: the op this picture is about (detect_anomaly's first NaN/inf, "
                         "diverge's first parting op)",
               f'BORDER="4" COLOR="{HIGHLIGHT}"'),
    "arrows": ("→", "gradients flow along the arrows, from the top down to the leaves", 'BORDER="0"'),
    "values": ("data, grad", "values (4 digits) of tensors of ≤ 16 elements", 'BORDER="0"'),
    "norm": ("grad norm", "size (L2 norm) of the tensor's gradient", 'BORDER="0"'),
    "share": (_small("share 0.7", 9, SHARE), "a part's share of a summed gradient: part · total / (total · total), "
              "the dot products of all their elements (the shares of a sum add up to 1)", 'BORDER="0"'),
    "no shares": (_small("no shares", 9, SHARE), "no gradient here is a sum of parts (no tensor feeds two ops), "
                  "so no arrow has a share to show", 'BORDER="0"'),
    "path": (f'<FONT COLOR="{HIGHLIGHT}">━━</FONT>', "the path from the loss taking the largest share at "
             "every sum", 'BORDER="0"'),
}


def _legend(needed):
    """The legend table, with a row for each kind in `needed` (and the arrows, which every picture has)."""
    rows = ['<TR><TD COLSPAN="2" BORDER="0"><B>How to read this graph</B></TD></TR>']
    rows += [_legend_row(*row) for kind, row in LEGEND.items() if kind in needed | {"arrows"}]
    return ('<<TABLE BORDER="1" COLOR="#bbbbbb" CELLBORDER="1" CELLSPACING="3" CELLPADDING="3">'
            + "".join(rows) + "</TABLE>>")


def _emit(pic, graph):
    """Nodes into nested clusters by scope ("block" holds "block.attn"), then the edges."""
    scopes = sorted({n.cluster for n in pic.nodes.values() if n.cluster})
    parent = {s: max((o for o in scopes if s.startswith(o + ".")), key=len, default="") for s in scopes}
    children = {}
    for s in scopes:
        children.setdefault(parent[s], []).append(s)
    members = {}
    for key, node in pic.nodes.items():
        members.setdefault(node.cluster, []).append(key)
    counter = iter(range(len(scopes)))

    def fill(g, scope):
        for key in members.get(scope, ()):
            node = pic.nodes[key]
            g.node(key, label=node.label, **node.attrs)
        for child in children.get(scope, ()):
            with g.subgraph(name=f"cluster_{next(counter)}") as sub:
                sub.attr(label=dot_text(child), style="rounded,dashed", color="#9aa5b1", fontcolor=MUTED,
                         fontsize="10", labeljust="l")
                fill(sub, child)

    fill(graph, "")
    for (a, b, _), attrs in pic.edges.items():
        graph.edge(a, b, **attrs)


@functools.cache
def _digraph_class():
    """graphviz.Digraph, but where Graphviz's `dot` is missing Jupyter shows how to install it in place of the
    picture, rather than a traceback that stops a notebook's "Run All" at its first picture."""
    graphviz = _graphviz()

    class Digraph(graphviz.Digraph):
        def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
            try:
                return super()._repr_mimebundle_(include, exclude, **kwargs)
            except graphviz.ExecutableNotFound:
                return {"text/plain": f"(no picture: Graphviz's `dot` program is not on PATH; {INSTALL_DOT}; "
                                      "then rerun this cell)"}

    return Digraph


def _digraph(title):
    graph = _digraph_class()("backward", graph_attr={
        "rankdir": "TB", "nodesep": "0.3", "ranksep": "0.35", "fontname": FONT, "fontsize": "12",
        "labelloc": "t", "labeljust": "l", "newrank": "true", "ordering": "out"},  # inputs left to right: A, B
        node_attr={"fontname": FONT, "fontsize": "11", "margin": "0.12,0.06"},
        edge_attr={"color": "#4a4a4a", "arrowsize": "0.7", "fontname": FONT})
    if title:
        graph.attr(label=dot_text(title))
    return graph


def draw_value(root, title=None, grads=None):
    """Chapter one's picture, as micrograd's draw_dot: every Value with its data and grad, every op with
    its local derivatives, and on each arrow from an op to an input the factor its gradient is multiplied by.
    `grads(v)`, when given, are the lines shown as v's gradient (see draw)."""
    walk = ValueWalk(root)
    key, okey = node_keys(walk)
    pic = _Picture()
    for v in walk.order:
        style = "filled"
        if v is root:
            legend, (fill, border) = "output", LOSS
        elif v.inputs:
            legend, (fill, border) = "computed", INTERMEDIATE
        elif isinstance(v, Constant):  # data, a label, a hyper-parameter: its gradient goes nowhere
            legend, (fill, border), style = "constant", CONSTANT, "filled,dashed"
        else:
            legend, (fill, border) = "leaf", PARAMETER
        name = f"<B>{dot_text(walk.label(v))}</B>" if v.name or legend == "constant" \
            else f"<I>{walk.label(v)}</I>"
        if legend == "constant":
            rows = []
        else:
            rows = [_small(row, 10, OP[1]) for row in (grads(v) if grads is not None else grad_rows(v, v.grad))]
        label = "<" + "<BR/>".join([name, _small(f"data {fixed(v.data, 4)}", 10, "#1f1f1f")] + rows) + ">"
        pic.nodes[key[id(v)]] = _Node("tensor", label, {"shape": "box", "style": style, "fillcolor": fill,
                                                         "color": border, "penwidth": "1.2"}, legend={legend})
        if not v.inputs:
            continue
        op = okey[id(v)]
        text = f"<B>{dot_text(v.op.name)}</B><BR/>{_small(v.op.rule, 9, OP[1])}"
        pic.nodes[op] = _Node("op", f"<{text}>", {"shape": "box", "style": "rounded,filled", "fillcolor": OP[0],
                                                  "color": OP[1]}, legend={"value op"})
        pic.edge(key[id(v)], op, {})
        reads = Counter()  # a*a reads a twice: two arrows, one per local gradient, so the labels add up to its grad
        for x, local in zip(v.inputs, v.local_grads):
            pic.edge(op, key[id(x)], {"label": f"× {local:.4g}", "fontsize": "10", "fontcolor": OP[1]}, reads[id(x)])
            reads[id(x)] += 1
    graph = _digraph(title)
    graph.node("legend", label=_legend(set().union(*(n.legend for n in pic.nodes.values()))),
               shape="plaintext", margin="0")
    _emit(pic, graph)
    return graph


def tensor_only(root, **options):
    """Those of draw's `options` (its keywords but title and grads) that are set where `root` is a Value, whose
    graph has no modules to fold, no shares to show and is drawn whole: refused rather than silently ignored."""
    if not isinstance(root, Value):
        return []
    return [name for name, value in options.items() if value is not False and value is not None and value != ()]


def draw(tensor, collapse=False, depth=None, title=None, grads=None, highlight=(), flow=None, flow_to=None):
    """The backward graph of `tensor` (a Tensor or a Value) as a `graphviz.Digraph` (render it, or show it in Jupyter).

    collapse: False draws every op; True folds each module (the ops' `scope`) into one box,
        one per transformer block (see _module_of); an int N folds by the first N parts of
        the dotted scope ("transformer.h.0" is 3).
    depth: draw only the ops at most `depth` op hops from `tensor` (None: all).
    title: a caption above the picture.
    grads: a function node -> the lines (plain text) its box shows as its gradient, for every node that
        needs one, in place of what backward left in `.grad`. They are the last lines of the box, which
        Graphviz makes wide enough for them: the trace page passes the widest text a box will hold and
        writes each step's gradients over it.
    highlight: ops or tensors to mark with a thick red border (detect_anomaly's culprit).
    flow: True (or a viz.flow.Flow of `tensor`) labels each arrow that brings a part of a summed gradient with
        its share ⟨part, total⟩/‖total‖²; collapsed, each block's arrow into its input splits it into skip,
        attention and MLP. flow_to: a tensor of the graph; the path from the loss to it that takes the largest
        share at every sum is drawn red (it implies flow).
    Reads the graph only. Call it before backward(), or after backward(retain_graph=True):
    a plain backward() frees the graph, and only its last op can then be drawn.
    """
    # checked before anything is drawn: a bare tensor or a '2' would otherwise fail deep inside with no hint
    if not isinstance(tensor, (ag.Tensor, Value)):
        raise TypeError(f"draw: expected an autograd Tensor or Value, got {type(tensor).__name__}; pass the loss "
                        "(or any result) of a computation on Tensors or Values, e.g. draw(loss)")
    if isinstance(highlight, (str, bytes)) or not isinstance(highlight, (tuple, list, set, frozenset)):
        raise TypeError(f"draw: highlight must be a tuple of ops or tensors, got {type(highlight).__name__}; "
                        "for one, pass highlight=(t,)")
    if depth is not None and (not isinstance(depth, int) or isinstance(depth, bool)):
        raise TypeError(f"draw: depth must be an int (op hops from the loss) or None, got {depth!r}")
    refused = tensor_only(tensor, collapse=collapse, depth=depth, highlight=highlight, flow=flow, flow_to=flow_to)
    if refused:
        raise TypeError(f"draw: {', '.join(f'{n}=' for n in refused)} are for a Tensor's graph, not a Value's; "
                        "drop them")
    if isinstance(tensor, Value):
        return draw_value(tensor, title, grads)
    _graphviz()
    if collapse is not True and collapse is not False and (not isinstance(collapse, int) or collapse < 1):
        raise ValueError(f"draw: collapse must be True, False or a scope depth ≥ 1, got {collapse!r}")
    if depth is not None and depth < 0:
        raise ValueError(f"draw: depth must be ≥ 0 (op hops from the loss), got {depth}")
    walk = GraphWalk(tensor)
    pic, tkey, okey = _expanded(walk, grads)
    if collapse:
        pic = _collapsed(walk, pic, tkey, okey, collapse)
    needed = set()
    if flow is not None or flow_to is not None:
        flow = Flow(tensor) if flow is None or flow is True else flow
        needed |= _show_shares(pic, walk, flow, tkey, okey, flow_to)
    if depth is not None:
        pic = _limit_depth(pic, tkey[id(tensor)], depth)
    for node in highlight:
        key = okey.get(id(node)) or tkey.get(id(node))
        key = pic.rep.get(key, key)  # collapsed: the module box the op folded into
        if key in pic.nodes:
            pic.nodes[key].attrs.update(color=HIGHLIGHT, penwidth="5")
            pic.nodes[key].legend.add("marked")
    graph = _digraph(title)
    graph.node("legend", label=_legend(needed.union(*(n.legend for n in pic.nodes.values()))),
               shape="plaintext", margin="0")
    _emit(pic, graph)
    return graph


def _show_shares(pic, walk, flow, tkey, okey, flow_to):
    """Write each part's share on the arrow that brings it (arrows folded into one add their shares), each
    block's split on its arrow into its input, and the path to `flow_to` in red; the legend rows it needs."""
    def drawn(a, b):
        edge = (pic.rep.get(a, a), pic.rep.get(b, b), 0)  # Flow gives a repeated input one part: its first arrow
        return edge if edge[0] != edge[1] and edge in pic.edges else None

    labels = {}
    for x in walk.order:
        shares = flow.shares(x)
        if len(shares) < 2:
            continue
        summed = {}
        for op, s in shares:
            edge = drawn(okey[id(op)], tkey[id(x)])
            if edge is not None:
                summed[edge] = None if s is None or summed.get(edge, 0.0) is None else summed.get(edge, 0.0) + s
        labels.update(zip(summed, (f"share {text}" for text in shares_text(list(summed.values())))))
    splits = {}
    for block, (x, shares) in (flow.blocks() if pic.rep else {}).items():  # a block's arrows fold into one
        names = sorted(shares, key=lambda name: name != "skip")
        split = "into the block's input: " + " · ".join(
            f"{name} {text}" for name, text in zip(names, shares_text([shares[name] for name in names])))
        for op, _ in flow.parts(x):
            edge = drawn(okey[id(op)], tkey[id(x)]) if inside(op, block) else None
            if edge is not None:
                splits[edge] = split
    for edge, text in labels.items():
        role = pic.edges[edge].get("label", "")
        text = splits.pop(edge, f"{role} · {text}" if role else text)  # a block's split replaces its input's role
        pic.edges[edge] = {**pic.edges[edge], "label": text, "fontcolor": SHARE, "fontsize": "10"}
    shown = {"share"} if labels else {"no shares"}
    if flow_to is None:
        return shown
    for op, x in flow.path(flow_to):
        for a, b in ((tkey[id(flow.output_of(op))], okey[id(op)]), (okey[id(op)], tkey[id(x)])):
            edge = drawn(a, b)
            if edge is not None:
                pic.edges[edge] = {**pic.edges[edge], "color": HIGHLIGHT, "penwidth": "3"}
    return shown | {"path"}


def build_demo(module, backward=True):
    """Run `module`'s demo_loss(), keep every gradient, and backward once (graph kept): (name, loss)."""
    name, loss = demo_loss_of(module)
    if backward and isinstance(loss, Value):
        loss.backward()
    elif backward:
        keep_gradients(loss)
    return name, loss


def keep_gradients(loss, grad=None):
    """Backward with every intermediate tensor keeping its gradient, and the graph kept for drawing."""
    for t in GraphWalk(loss).order:
        if not t.is_leaf:
            t.retain_grad()
    loss.backward(grad, retain_graph=True)


class LeafError(ValueError):
    """A leaf gradient_of cannot take the gradient for: the message says which leaves it can."""


def gradient_of(loss, leaf=None):
    """∂loss/∂leaf with a graph of its own (create_graph=True), named so: what `--double` draws and
    `viz.trace --double` walks. `leaf` is a leaf's name (default: the first the forward pass read that has
    one, else the first), a leaf that needs a gradient: not a Constant, which draw_value draws without one.
    The forward graph's `.grad`s are left as they were (a Value's, zeroed). A name that is no such leaf, or a
    gradient that is a constant, raises LeafError."""
    walk = walk_of(loss)
    leaves = [t for t in walk.tensors if (not t.inputs and not isinstance(t, Constant) if isinstance(t, Value)
                                          else t.is_leaf and t.requires_grad)]
    named = [t for t in leaves if t.name] or leaves
    if leaf is None:
        chosen = named[0]
    else:
        chosen = next((t for t in leaves if walk.label(t) == leaf), None)
        if chosen is None:
            raise LeafError(f"no leaf {leaf} below the loss; name one of its leaves: "
                            + ", ".join(walk.label(t) for t in named))
    if isinstance(loss, Value):
        loss.backward(create_graph=True)
        grad = chosen.grad
        for v in walk.order:  # the first backward's Values: the gradient's own backward fills .grad afresh
            v.grad = 0.0
    else:
        (grad,) = ag.grad(loss, chosen, create_graph=True)
    if not isinstance(grad, (Value, ag.Tensor)) or isinstance(grad, ag.Tensor) and not grad.requires_grad:
        raise LeafError(f"∂{walk.label(loss)}/∂{walk.label(chosen)} does not depend on anything that requires "
                        "grad: it is a constant, with no graph to draw")
    grad.name = f"∂{walk.label(loss)}/∂{walk.label(chosen)}"
    return grad


def build_double(module, leaf=None, backward=True):
    """Run `module`'s demo_loss(), take ∂loss/∂leaf with its graph (gradient_of), and run that gradient's own
    backward, every gradient kept: (name, the gradient). A tensor's gradient g is seeded with itself, the
    backward of ½‖g‖², which leaves H g on the leaf (a Hessian-vector product; ones would give H·1, which
    softmax's Hessian sends to 0)."""
    name, loss = demo_loss_of(module)
    grad = gradient_of(loss, leaf)
    if backward and isinstance(grad, Value):
        grad.backward()
    elif backward:
        keep_gradients(grad, grad.data)
    return name, grad


def title_of(name, loss, backward):
    """The caption of module `name`'s picture: its demo loss, and whether backward has run."""
    when = "after backward" if backward else "before backward"
    return f"{name}.demo_loss() = {number(float(loss.data), 6)} · backward graph, {when}"


def main(argv=None):
    from models.cli import Parser  # here, not at the top: draw() needs nothing from models
    from models.doors import stdout_reader_left
    from models.training.checkpoint import default_picture, picture_file
    p = Parser("python -m viz.graph", "Draw the backward graph of a model module's demo_loss() with Graphviz.",
               epilog=f"Needs the Python package graphviz ({INSTALL_PYTHON}) and Graphviz's `dot` program "
                      f"to render; without `dot` the .dot source is written and the exit status is {NO_DOT_EXIT}.")
    p.add_argument("module", help="a module defining demo_loss(), e.g. models.bigram (model.bigram works too)")
    p.add_argument("--format", choices=FORMATS, help="output format (default: --out's suffix, else svg)")
    p.add_argument("--out", type=picture_file,
                   help="output file (default: graph_<module>.<format> in the current directory, flow_<module> with --flow)")
    p.add_argument("--collapse", action="store_true", help="fold each module into one box")
    p.add_argument("--collapse-depth", type=int, metavar="N",
                   help="fold modules by the first N parts of their dotted name (implies --collapse) "
                        "(default: none, each module its own box)")
    p.add_argument("--depth", type=int, metavar="N",
                   help="draw only the ops within N hops of the loss (default: none, all of them)")
    p.add_argument("--no-backward", action="store_true",
                   help="draw the graph before backward has run (no gradient norms)")
    p.add_argument("--flow", nargs="?", const="", metavar="LEAF",
                   help="write each part's share of a summed gradient on its arrow; with LEAF (a tensor's name, "
                        "e.g. E), draw in red the path from the loss to it taking the largest share at every sum "
                        "(default: none, no shares)")
    p.add_argument("--double", nargs="?", const="", metavar="LEAF",
                   help="draw the gradient ∂loss/∂LEAF as a graph of its own (create_graph=True): backward's ops "
                        "as ordinary ops, a box per step of backward (default: none, the loss's graph; LEAF "
                        "left out: the first named leaf)")
    args = p.parse_args(argv)
    if args.flow is not None and args.no_backward:
        p.error("--flow shows the gradient's parts, which backward makes; drop --no-backward")
    if args.collapse_depth is not None and args.collapse_depth < 1:
        p.error(f"--collapse-depth must be at least 1, got {args.collapse_depth}")
    if args.depth is not None and args.depth < 0:
        p.error(f"--depth must be at least 0, got {args.depth}")
    fmt = picture_format(p, args)
    try:
        _graphviz()
    except ImportError as exc:
        print(f"viz.graph: error: {exc}", file=sys.stderr)
        return 1
    collapse = args.collapse_depth if args.collapse_depth is not None else args.collapse
    when = "before backward" if args.no_backward else "after backward"
    try:
        if args.double is not None:
            if args.flow is not None:
                print("viz.graph: error: --flow and --double draw different graphs; pass one of them", file=sys.stderr)
                return 1
            name, loss = build_double(args.module, args.double or None, backward=not args.no_backward)
            # in words, as in the boxes: a PNG's default font draws ‖g‖ like "llgll"
            seed = "" if args.no_backward else " (from ½ norm(g)²)" if isinstance(loss, ag.Tensor) else ""
            boxed = ", boxed by step," if isinstance(loss, ag.Tensor) else ""  # a Value's ops have no scope to box
            title = (f"{loss.name} of {name}.demo_loss() with create_graph=True: backward's ops{boxed} "
                     f"are ops like any other · {when}{seed}")
        else:
            name, loss = build_demo(args.module, backward=not args.no_backward)
            title = title_of(name, loss, not args.no_backward)
    except ModuleError as exc:
        print(f"viz.graph: error: {exc}", file=sys.stderr)
        return 1
    except LeafError as exc:
        print(f"viz.graph: error: --double: {exc}", file=sys.stderr)
        return 1
    # the loss's kind is known only once the module has run: draw's rule, said in the flags that set the options
    refused = tensor_only(loss, collapse=collapse, depth=args.depth, flow=args.flow)
    if "flow" in refused:
        print(f"viz.graph: error: --flow draws a tensor graph's shares; {name}.demo_loss() is a Value "
              "(viz.trace's page shows each part of its sums)", file=sys.stderr)
        return 1
    if refused:  # collapse=, depth= or both: named by the flags that gave them (a --depth 0 too)
        flags = [flag for flag, given in (("--collapse", args.collapse),
                                          ("--collapse-depth", args.collapse_depth is not None),
                                          ("--depth", args.depth is not None)) if given]
        print(f"viz.graph: error: {', '.join(flags)} fold or cut a tensor graph; {name}.demo_loss() is a "
              "Value, whose graph is drawn whole: drop them", file=sys.stderr)
        return 1
    try:
        flow_to = _named(loss, args.flow) if args.flow else None
    except KeyError as exc:
        print(f"viz.graph: error: {exc.args[0]}", file=sys.stderr)
        return 1
    if args.flow is not None:
        title += " · each part's share of a summed gradient" + (f", the path to {args.flow} in red" if flow_to is not None else "")
    graph = draw(loss, collapse=collapse, depth=args.depth, title=title, flow=True if args.flow is not None else None,
                 flow_to=flow_to)
    # a flow picture is named apart, so that it does not replace the plain graph of the same module
    stem = ("flow_" if args.flow is not None else "graph_") + name.rsplit('.', 1)[-1]
    stem += "_double" if args.double is not None else ""
    out = Path(args.out or default_picture(p, f"{stem}.{fmt}"))
    try:
        return _write(graph, out, fmt)
    except OSError as exc:  # the disk is full or read-only, a folder of the path was taken meanwhile, a FIFO closed
        if stdout_reader_left(exc):  # `| head` has read enough of the picture or the "wrote …" line
            raise
        print(f"viz.graph: error: cannot write {exc.filename or out}: {exc.strerror or exc}", file=sys.stderr)
        return 1


def picture_format(p, args):
    """The picture's format, at parse time: --format, else --out's suffix, else svg. An --out whose suffix names
    another format than --format, or no format at all, is refused: x.png holding SVG text opens nowhere."""
    suffix = Path(args.out).suffix.lower()[1:] if args.out else ""
    fmt = args.format or (suffix if suffix in FORMATS else None)
    if fmt is None and suffix:
        p.error(f"--out {args.out}: the format comes from the suffix, .svg, .png, .pdf or .dot; use one of "
                "those, or give --format")
    if suffix in FORMATS and suffix != fmt:
        p.error(f"--format {fmt} but --out {args.out} names a .{suffix} file; make the two agree")
    return fmt or "svg"


def _named(loss, name):
    """The tensor of `loss`'s graph labelled `name` (its .name), for --flow LEAF; a KeyError naming the others."""
    walk = GraphWalk(loss)
    found = [t for t in walk.order if walk.label(t) == name]
    if not found:
        names = sorted({t.name for t in walk.order if t.name})
        raise KeyError(f"--flow {name}: no tensor of that name needs a gradient in the graph; named ones: "
                       f"{', '.join(names[:24])}{' …' if len(names) > 24 else ''}")
    return found[0]


def _write(graph, out, format):
    """Each file whole or not at all (models.io.atomic_path): a Ctrl-C mid-write leaves no half-written picture."""
    if format == "dot":
        with atomic_path(out) as tmp:
            tmp.write_text(graph.source, encoding="utf-8")
        print(f"wrote {out}")
        return 0
    if shutil.which("dot") is None:
        return _write_source_instead(graph, out)
    try:
        picture = graph.pipe(format=format)
    except _graphviz().ExecutableNotFound:
        return _write_source_instead(graph, out)
    with atomic_path(out) as tmp:
        tmp.write_bytes(picture)
    print(f"wrote {out}")
    return 0


def _write_source_instead(graph, out):
    source = out.with_suffix(".dot")
    with atomic_path(source) as tmp:
        tmp.write_text(graph.source, encoding="utf-8")
    print(f"wrote {source} (the Graphviz source; no {out.suffix[1:]} was made)")
    print(f"Graphviz's `dot` program is not on PATH, so the picture could not be rendered. To get it, "
          f"{INSTALL_DOT}; then rerun this command, or run: dot -T{out.suffix[1:]} {source} -o {out}",
          file=sys.stderr)
    return NO_DOT_EXIT


if __name__ == "__main__":
    from models.doors import run_main
    sys.exit(run_main(main, "viz.graph"))
