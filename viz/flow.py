"""Which path carries the gradient: each part of a summed gradient and its share of the total.

    from viz.flow import Flow
    flow = Flow(loss)                 # backward's own walk, run again without writing any .grad
    flow.shares(E)                    # [(op, share)]: E's gradient, part by part
    flow.path(E)                      # the path from the loss to E, at every sum the part with the largest share
    flow.blocks()                     # GPT-2's blocks: skip, attention and MLP shares at each block's input

    python -m viz.graph models.tiny --flow E          # the shares on the picture's edges, the path to E in red

What it promises. A tensor used by several ops gets one gradient part from
each, and backward adds them: a residual stream read by a branch and by the
Add that skips it, a weight tied to the embedding lookup and the LM head. The
share of a part p in the total T is ⟨p, T⟩ / ‖T‖², so the shares of a sum add
up to 1 (Σ⟨p, T⟩ = ⟨T, T⟩); a part along the total has for its share its
length over the total's, one at right angles to it 0, and a part that cancels
the others a negative share. Parts are the engine's own numbers: `autograd.backward_steps`, the
walk inside `Tensor.backward`, with the arrays an op sends to one input summed
(x·x sends x two parts). Where a total is 0 there is no share (None). The shares
of one sum are written to one decimal place (shares_text), so that the shares
shown add up to 1 as well.

For a block of residual Adds (GPT-2's x + attn(ln_1(x)), then + mlp(ln_2(·))),
`blocks()` splits the gradient reaching the block's input into the skip part
(the gradient of the block's output, carried through every Add unchanged),
each branch's part (what the branch sends into the stream where it reads
it, carried on through the Adds before it) and any part from outside the
block; the Adds' VJP is the identity, so these add up to the gradient exactly.
"""
import math
from decimal import Decimal

import numpy as np

from autograd import Tensor, backward_steps, ops, root_grad, topological_order

from .numbers import host


def share(part, total):
    """⟨part, total⟩ / ‖total‖² (floats or arrays of one shape); None where the total is 0."""
    t = host(total).astype(np.float64)
    size = float((t * t).sum())
    if size == 0:
        return None
    return float((host(part).astype(np.float64) * t).sum() / size)


MOST_PLACES = 6  # a part under half a millionth of the total is written apart, in scientific notation


def shares_text(values):
    """The shares of one sum as text, all to one decimal place, so that the parts shown add up to their sum
    (1) shown to that place: the place of the smallest part's third significant digit, or a later one where the
    parts rounded there do not add up (up to MOST_PLACES, where three thirds still show 0.999999). A part that
    would read 0 at that place is written in scientific notation (8.21e-11), not as a 0 it is not, and sets no
    place; None (the total is 0) as "—"."""
    finite = [v for v in values if v is not None and math.isfinite(v)]  # a NaN share: an anomaly's graph
    sizes = [abs(v) for v in finite if abs(v) >= 0.5 * 10.0 ** -MOST_PLACES]  # None, NaN, inf, 0 set no place

    def fixed(value, places):
        return Decimal(f"{value:.{places}f}")
    places = min(max(2 - math.floor(math.log10(min(sizes))), 0), MOST_PLACES) if sizes else MOST_PLACES
    while (sizes and len(finite) == len(values) and places < MOST_PLACES
           and sum(fixed(v, places) for v in values) != fixed(math.fsum(values), places)):
        places += 1

    def text(v):
        if v is None:
            return "—"
        if not v:
            return "0"
        return f"{v:.{places}f}" if math.isfinite(v) and fixed(v, places) else f"{v:.3g}"
    return [text(v) for v in values]


def _block_of(scope):
    """The numbered module a scope is in ("transformer.h.0.attn" → "transformer.h.0"), or None."""
    parts = scope.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[:i + 1])
    return None


def inside(op, block):
    return op is not None and (op.scope == block or op.scope.startswith(block + "."))


class Flow:
    """The gradient parts of every tensor below `root` (a Tensor whose graph is still there)."""

    def __init__(self, root):
        if not isinstance(root, Tensor):
            raise TypeError(f"flow: expected an autograd Tensor, got {type(root).__name__} (the shares are "
                            "drawn for tensor graphs)")
        grad = root_grad(root, None, "flow")
        if any(t.op is not None and t.op.inputs is None for t in topological_order(root)):
            raise RuntimeError("flow: the graph was freed by backward(); call backward(retain_graph=True), or "
                               "compute the flow before backward")
        self.root = root
        self._parts, self._total, self._output = {}, {}, {}
        for t, g, sent in backward_steps(root, grad, free=False):
            self._total[id(t)] = g  # complete by the time backward visits t
            if t.op is None:
                continue
            self._output[id(t.op)] = t
            for x, pg, _ in sent:
                if pg is None:
                    continue
                parts = self._parts.setdefault(id(x), [])
                if parts and parts[-1][0] is t.op:  # the same op again (x·x): one edge, one part
                    parts[-1] = (t.op, parts[-1][1] + pg)
                else:
                    parts.append((t.op, pg))

    def total(self, t):
        """∂L/∂t: the sum of its parts."""
        return self._total[id(t)]

    def parts(self, t):
        """[(op, part)]: what each op that reads `t` sends it, in the order backward adds them."""
        return self._parts.get(id(t), [])

    def shares(self, t):
        """[(op, share)] for `t`'s parts; the shares add up to 1 (None where the total is 0)."""
        parts = self.parts(t)
        total = self.total(t) if parts else None
        return [(op, share(part, total)) for op, part in parts]

    def output_of(self, op):
        """The tensor `op` made."""
        return self._output[id(op)]

    def path(self, target):
        """The path from the loss to `target`: [(op, tensor)], loss side first, each op sending the gradient
        part to the tensor after it; going up from `target`, at every sum the part with the largest share."""
        if id(target) not in self._total:
            raise ValueError("flow: no gradient reaches that tensor from the loss")
        edges, t = [], target
        while t is not self.root:
            op, _ = max(self.shares(t), key=lambda entry: -np.inf if entry[1] is None else entry[1])
            edges.append((op, t))
            t = self.output_of(op)
        return edges[::-1]

    def blocks(self):
        """{block: (its input, {part: share})} for every numbered module whose residual Adds form one stream
        (GPT-2's blocks): the parts of the gradient at the block's input are "skip", each branch by its module's
        name ("attn", "mlp"), and "outside" where something outside the block also reads the input; their
        shares add up to 1."""
        adds = {}
        for t in reversed(topological_order(self.root)):  # forward order
            if isinstance(t.op, ops.Add) and t.op.scope and _block_of(t.op.scope) == t.op.scope:
                adds.setdefault(t.op.scope, []).append(t)
        found = {}
        for block, chain in adds.items():
            split = self._residual_parts(block, chain)
            if split is not None:
                stream_in, parts = split
                total = self.total(stream_in)
                found[block] = (stream_in, {name: share(part, total) for name, part in parts.items()})
        return found

    def _residual_parts(self, block, chain):
        """(the block's input, {name: part}) for a chain of Adds s₀ → s₁ → … along one stream, or None where the
        Adds do not form one (or broadcast, whose VJP is then no identity)."""
        parts, stream = {}, None
        for i, out in enumerate(chain):
            x, y = out.op.inputs if out.op.inputs is not None else (None, None)
            if i == 0:
                stream, branch = (x, y) if not inside(x.op, block) else (y, x)
                if inside(stream.op, block):
                    return None
                first = stream
            elif chain[i - 1] in (x, y):
                stream, branch = (x, y) if x is chain[i - 1] else (y, x)
            else:
                return None
            if stream.shape != out.shape or id(stream) not in self._total:
                return None
            name = _branch_name(branch, block, i)
            for op, part in self.parts(stream):
                if op is out.op:
                    continue
                key = name if i > 0 or inside(op, block) else "outside"
                parts[key] = part if key not in parts else parts[key] + part
        parts["skip"] = self.total(chain[-1])
        return first, parts


def _branch_name(branch, block, i):
    """A branch by the module below `block` that made it ("transformer.h.0.mlp" → "mlp"), else "branch i"."""
    scope = branch.op.scope if branch.op is not None else ""
    rest = scope[len(block) + 1:].split(".")[0] if scope.startswith(block + ".") else ""
    return rest or f"branch {i + 1}"
