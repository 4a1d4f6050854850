"""An op's local Jacobian, drawn: `ag.jacobian`'s matrix as a heatmap beside the closed form its docstring states.

    python -m viz.jacobian softmax                    # writes jacobian_softmax.png
    python -m viz.jacobian layer_norm --shape 2,4 --seed 1 --out ln.svg
    from viz.jacobian import draw
    draw(lambda x: (x * x).sum(axis=-1), x)          # any function: a Figure, inline in Jupyter

What the picture promises, for each op in OPS: the left heatmap is
`ag.jacobian(fn, x)` (one backward pass per output element), rows the output's
indices and columns the input's, coloured with a diverging map centred at 0;
the right one is the closed form, computed from the values the op itself saved
for backward (softmax's p gives diag(p) − ppᵀ; embedding's ids give its 0/1
scatter pattern); under them, the largest difference between the two, and
one line showing that the VJP backward() computes equals gᵀJ for a random g,
though backward never forms J. Inputs are float64, seeded (`--seed`), of
`--shape`.
"""

if __name__ == "__main__":  # before the imports below: a Ctrl-C while they load, or while the options are parsed,
    from models.interrupts import exit_quietly_on_interrupt  # ends in one line, not a traceback
    exit_quietly_on_interrupt("viz.jacobian")

import math
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import autograd as ag
from autograd import Tensor, ops, topological_order
from autograd.heatmaps import Panel, figure, index_labels, picture_format
from models.io import write_figure

LARGEST = 64  # elements of the input (--shape): a picture for looking at, not a computation


@dataclass
class OpCase:
    """One op to draw: `make(shape, rng)` returns (x, fn); `closed(op)` the Jacobian from `op`'s saved values."""

    name: str
    formula: str  # the closed form, as the op's docstring states it
    shape: tuple  # the default shape of x
    what: str  # what x is, and what --shape sets
    op: type  # the Function whose saved values the closed form reads
    make: object
    closed: object
    ndim: tuple = (1, 2)  # the numbers of axes --shape may give
    note: object = None  # op -> a line naming the op's other arguments (ids, targets), for the picture


def _rows_alone(blocks, out_tail, in_tail):
    """J[l, i, l′, j] = δ(l, l′) · blocks[l][i, j]: the Jacobian of an op that maps each row on its own
    (softmax, layer norm, a query's attention), built from each row's block."""
    lead = blocks.shape[:blocks.ndim - len(out_tail) - len(in_tail)]
    count, n_out, n_in = math.prod(lead), math.prod(out_tail), math.prod(in_tail)
    j = np.zeros((count, n_out, count, n_in))
    j[np.arange(count), :, np.arange(count), :] = blocks.reshape(count, n_out, n_in)
    return j.reshape(lead + out_tail + lead + in_tail)


def _softmax_blocks(p):
    """diag(p) − ppᵀ for each row of p (…, n): (…, n, n)."""
    return np.einsum("...i,ij->...ij", p, np.eye(p.shape[-1])) - p[..., :, None] * p[..., None, :]


def _softmax_closed(op):
    p = op.saved[0]
    return _rows_alone(_softmax_blocks(p), p.shape[-1:], p.shape[-1:])


def _log_softmax_closed(op):
    p = op.saved[0]
    n = p.shape[-1]
    return _rows_alone(np.eye(n) - np.broadcast_to(p[..., None, :], p.shape[:-1] + (n, n)), (n,), (n,))


def _cross_entropy_closed(op):
    """reduction='none': ∂Lᵢ/∂zᵢ = pᵢ − onehot(yᵢ), row i's loss seeing row i alone."""
    shape = op.shape
    if op.fused:  # the fused kernels keep p − onehot(y) itself
        p_minus_y = op.saved[0]
    else:
        p, targets, _ = op.saved
        p_minus_y = p.copy()
        p_minus_y[np.arange(len(targets)), targets] -= 1
    return _rows_alone(p_minus_y.reshape(shape), (), shape[-1:])


def _layer_norm_closed(op):
    """∂yᵢ/∂xⱼ = γᵢ/σ · (δᵢⱼ − 1/n − x̂ᵢx̂ⱼ/n) for each row, σ = √(var + ε)."""
    first, stats, gamma = op.saved
    if op.saved_names == ops.LayerNorm.fused_saved_names:  # the fused kernels keep x and each row's (μ, 1/σ)
        rstd = stats[1].reshape(first.shape[:-1] + (1,))
        xhat = (first - stats[0].reshape(rstd.shape)) * rstd
    else:
        xhat, rstd = first, stats
    n = xhat.shape[-1]
    blocks = (gamma[:, None] * rstd[..., None]
              * (np.eye(n) - 1 / n - xhat[..., :, None] * xhat[..., None, :] / n))
    return _rows_alone(blocks, (n,), (n,))


def _gelu_closed(op):
    """diag(s + x s (1 − s) · 2u′) with s = σ(2u), u = √(2/π)(x + 0.044715 x³)."""
    x, s = op.saved
    c, a = ops.GELU.C, ops.GELU.A
    if s is None:  # the fused kernels keep x alone and rebuild s, as here
        s = 1 / (1 + np.exp(-2 * c * (x + a * x ** 3)))
    return np.diag((s + x * s * (1 - s) * 2 * c * (1 + 3 * a * x * x)).ravel()).reshape(x.shape + x.shape)


def _tanh_closed(op):
    z = op.saved[0]
    return np.diag((1 - z * z).ravel()).reshape(z.shape + z.shape)


def _embedding_closed(op):
    """∂z[k, c]/∂W[v, c′] = 1[ids_k = v] · 1[c = c′]: 0/1, a row of W copied to each place its id is read."""
    ids, (rows, width) = op.ids, op.weight_shape
    picks = (ids.reshape(-1, 1) == np.arange(rows)).astype(np.float64)  # (k, v)
    return np.einsum("kv,cd->kcvd", picks, np.eye(width)).reshape(ids.shape + (width, rows, width))


def _matmul_closed(op):
    """∂Z[i, l]/∂A[j, c] = δᵢⱼ B[c, l], A's rows each mapped by the same Bᵀ (I ⊗ Bᵀ)."""
    a, b = op.saved
    return np.einsum("ij,cl->iljc", np.eye(a.shape[0]), b)


def _attention_closed(op):
    """∂Oᵢ/∂qᵢ = Vᵀ (diag(Pᵢ) − PᵢPᵢᵀ) K / √D for query i, 0 for another query's q."""
    q, k, v, _, _, p, _ = op.saved
    if p is None:  # a context longer than 4D keeps only the log-sum-exps: P is rebuilt from q and k
        p = ag.softmax(Tensor(q @ k.swapaxes(-1, -2) * op.scale), mask=op.mask).data
    blocks = np.einsum("...jd,...ijm,...mc->...idc", v, _softmax_blocks(p), k) * op.scale
    return _rows_alone(blocks, q.shape[-1:], q.shape[-1:])


def _make_softmax(shape, rng):
    return rng.standard_normal(shape), lambda x: ag.softmax(x)


def _make_masked_softmax(shape, rng):
    """A causal mask over the last two axes, as attention's: the last query sees every key, so query i sees
    keys 0 … i + (keys − queries)."""
    mask = np.tril(np.ones(shape[-2:], dtype=bool), k=shape[-1] - shape[-2])
    return rng.standard_normal(shape), lambda x: ag.softmax(x, mask=mask)


def _causal_note(op):
    """The mask drawn, in words: which keys query i sees, for any number of queries and keys."""
    queries, keys = op.params["mask"].shape
    offset = keys - queries
    sees = "keys 0 … i" + (f" + {offset}" if offset > 0 else f" − {-offset}" if offset < 0 else "")
    blind = f"; queries 0 … {-offset - 1} see none, p = 0" if offset < 0 else ""
    return f"mask: query i sees {sees}{blind}; a hidden key has p = 0, so its row and column of J are 0"


def _make_log_softmax(shape, rng):
    return rng.standard_normal(shape), lambda x: ag.log_softmax(x)


def _make_cross_entropy(shape, rng):
    targets = rng.integers(0, shape[-1], size=shape[:-1])
    return rng.standard_normal(shape), lambda z: ag.cross_entropy(z, targets, reduction="none")


def _make_layer_norm(shape, rng):
    gamma = Tensor(1 + 0.5 * rng.standard_normal(shape[-1]))
    beta = Tensor(0.5 * rng.standard_normal(shape[-1]))
    return rng.standard_normal(shape), lambda x: ag.layer_norm(x, gamma, beta)


def _make_elementwise(method):
    def make(shape, rng):
        return rng.standard_normal(shape), lambda x: getattr(x, method)()
    return make


def _make_embedding(shape, rng):
    """Four ids into a table W of `shape`, the first repeated last: its row of W is read at least twice."""
    ids = rng.integers(0, shape[0], size=4)
    ids[-1] = ids[0]
    return rng.standard_normal(shape), lambda w: ag.embedding(w, ids)


def _repeated_row_note(op):
    """The first id's row, read as often as the ids repeat it (a table of few rows draws it more than twice)."""
    ids = op.ids.ravel()
    count = int((ids == ids[0]).sum())
    read, rows = ("twice", "both rows") if count == 2 else (f"{count} times", f"those {count} rows")
    return f"ids = {ids.tolist()}: row {ids[0]} of W is read {read}, so the VJP adds {rows} of g into it (a scatter-add)"


def _make_matmul(shape, rng):
    b = Tensor(rng.standard_normal((shape[1], 2)))
    return rng.standard_normal(shape), lambda a: a @ b


def _make_attention(shape, rng):
    """Queries q (T, D) against fixed keys and values of the same shape, one head, causal."""
    k, v = (Tensor(rng.standard_normal((1, 1) + shape)) for _ in range(2))
    return rng.standard_normal(shape), lambda q: ag.scaled_dot_product_attention(q.reshape(1, 1, *shape), k, v)[0, 0]


OPS = {case.name: case for case in (
    OpCase("softmax", "∂p/∂z = diag(p) − ppᵀ (each row alone)", (5,), "z, the scores: (n,) or (rows, n)",
           ops.Softmax, _make_softmax, _softmax_closed),
    OpCase("masked_softmax", "diag(p) − ppᵀ with p = 0 where masked (causal)", (4, 4),
           "z, the scores (queries, keys), causally masked", ops.Softmax, _make_masked_softmax, _softmax_closed,
           ndim=(2,), note=_causal_note),
    OpCase("log_softmax", "∂y/∂z = I − 1pᵀ (each row alone)", (5,), "z: (n,) or (rows, n)",
           ops.LogSoftmax, _make_log_softmax, _log_softmax_closed),
    OpCase("cross_entropy", "∂Lᵢ/∂zᵢ = pᵢ − onehot(yᵢ) (reduction='none')", (3, 5),
           "z, the logits (rows, classes); the targets are drawn with the seed",
           ops.CrossEntropy, _make_cross_entropy, _cross_entropy_closed, ndim=(2,),
           note=lambda op: f"targets y = {op.params['targets'].tolist()}: row i's −1 sits at class yᵢ"),
    OpCase("layer_norm", "∂yᵢ/∂xⱼ = γᵢ/σ · (δᵢⱼ − 1/n − x̂ᵢx̂ⱼ/n) (each row alone)", (2, 4),
           "x: (n,) or (rows, n); γ and β are drawn with the seed", ops.LayerNorm, _make_layer_norm,
           _layer_norm_closed),
    OpCase("gelu", "diag(s + x·s(1 − s)·2u′), s = σ(2u), u = √(2/π)(x + 0.044715x³)", (6,), "x: 1 to 3 axes",
           ops.GELU, _make_elementwise("gelu"), _gelu_closed, ndim=(1, 2, 3)),
    OpCase("tanh", "∂z/∂x = diag(1 − z²), z = tanh x", (6,), "x: 1 to 3 axes", ops.Tanh, _make_elementwise("tanh"),
           _tanh_closed, ndim=(1, 2, 3)),
    OpCase("embedding", "∂z[k,c]/∂W[v,c′] = 1[idsₖ = v]·1[c = c′]", (5, 3),
           "W, the table (rows, width); 4 ids are drawn with the seed, the first repeated",
           ops.Embedding, _make_embedding, _embedding_closed, ndim=(2,),
           note=_repeated_row_note),
    OpCase("matmul", "∂Z[i,l]/∂A[j,c] = δᵢⱼ·B[c,l]  (I ⊗ Bᵀ)", (2, 3),
           "A (rows, inner) of Z = A @ B; B (inner, 2) is drawn with the seed", ops.MatMul, _make_matmul,
           _matmul_closed, ndim=(2,)),
    OpCase("attention", "∂Oᵢ/∂qᵢ = Vᵀ(diag(Pᵢ) − PᵢPᵢᵀ)K/√D, 0 across queries", (3, 2),
           "q (T, D) of causal attention; K and V (T, D) are drawn with the seed",
           ops.ScaledDotProductAttention, _make_attention, _attention_closed, ndim=(2,),
           note=lambda op: "query 0 sees key 0 alone: P₀ = [1], whose softmax Jacobian is 0, so ∂O₀/∂q₀ = 0"),
)}


@dataclass
class JacobianPicture:
    """What `picture` drew: the figure and the numbers on it."""

    figure: object
    jacobian: np.ndarray  # ag.jacobian(fn, x): out.shape + x.shape
    closed: np.ndarray  # the closed form, the same shape (None when none was given)
    max_difference: float  # max |jacobian − closed| (None without a closed form)
    vjp_difference: float  # max |backward(g) − gᵀJ| for the random g


def _vjp_check(out, leaf, jacobian, rng):
    """max |backward(g) − gᵀJ| for a random g: the VJP backward applies, against J written out. By ag.grad,
    which writes no .grad, as ag.jacobian writes none: backward() would add into the parameters fn reads. The
    graph is kept: the closed form and the notes read its ops' saved values, which a last backward may reuse."""
    g = rng.standard_normal(out.shape)
    vjp = ag.grad(out, leaf, g, retain_graph=True, allow_unused=True)[0] if out.requires_grad else None
    vjp = np.zeros(leaf.shape) if vjp is None else vjp.numpy()  # x does not reach the output: J is 0
    return float(np.abs(vjp.ravel() - g.ravel() @ jacobian.reshape(out.size, leaf.size)).max())


def _panels(jacobian, out_shape, in_shape, closed, closed_title):
    matrix = jacobian.reshape(math.prod(out_shape), math.prod(in_shape))
    axes = dict(ylabel="output index i", xlabel="input index j", rows=index_labels(out_shape),
                columns=index_labels(in_shape))
    panels = [Panel("ag.jacobian(fn, x)\nJ[i, j] = ∂outᵢ/∂xⱼ", matrix, **axes)]
    if closed is not None:
        panels.append(Panel(closed_title, closed.reshape(matrix.shape), **axes))
    return panels


def draw(fn, x, closed=None, title=None, seed=0):
    """The Jacobian of `fn` at `x` (a Tensor or array of floats, a few elements) as a heatmap: a Figure, which
    Jupyter shows inline and `.savefig(path)` writes. `closed`, an array of the Jacobian's shape (out.shape +
    x.shape) or a function of the output Tensor returning one, is drawn beside it with the largest difference.
    Under them: the check that backward's VJP equals gᵀJ for a random g (drawn with `seed`)."""
    x = np.asarray(x.numpy() if isinstance(x, Tensor) else x)
    if x.dtype.kind not in "biuf":  # float64 would drop a complex's imaginary part, and fail on text in NumPy
        raise TypeError(f"viz.jacobian.draw: x holds {x.dtype} values; pass an array of floats, "
                        "e.g. np.asarray(x, dtype=np.float64)")
    if x.size == 0:
        raise ValueError(f"viz.jacobian.draw: x has no elements (shape {x.shape}), so there is no Jacobian to draw; "
                         "pass an x of a few elements")
    return _picture(fn, x.astype(np.float64), closed, "closed form", title or "the Jacobian of fn at x",
                    np.random.default_rng(seed)).figure


def _picture(fn, x, closed, closed_title, title, rng, rule=None, note=None):
    jacobian = ag.jacobian(fn, x)
    leaf = Tensor(x, requires_grad=True)
    with ag.enable_grad():  # under no_grad() too, as ag.jacobian records fn: the closed form reads the graph's ops
        out = fn(leaf)
    if callable(closed):
        closed = closed(out)
    if closed is not None:
        closed = np.asarray(closed, dtype=np.float64)
        if closed.shape != jacobian.shape:
            raise ValueError(f"viz.jacobian.draw: the closed form has shape {closed.shape}, the Jacobian "
                             f"{jacobian.shape} (the output's shape, then the input's)")
    difference = None if closed is None else float(np.abs(jacobian - closed).max())
    vjp = _vjp_check(out, leaf, jacobian, rng)
    notes = [f"J is {jacobian.size // x.size} × {x.size}: output {tuple(out.shape)}, input {x.shape}, float64"]
    if difference is not None:
        notes.append(f"max |ag.jacobian − closed form| = {difference:.3g}")
    notes.append(f"VJP: backward(g) = gᵀJ to {vjp:.3g} for a random g, and backward never forms J"
                 + (": it applies" if rule else ""))
    if rule:
        notes += textwrap.wrap(rule, 96, initial_indent="  ", subsequent_indent="    ")
    if note is not None:
        notes += textwrap.wrap(note(out), 90, subsequent_indent="  ")  # the narrowest picture holds 90
    panels = _panels(jacobian, out.shape, x.shape, closed, closed_title)
    return JacobianPicture(figure([panels], title, notes), jacobian, closed, difference, vjp)


def _found_op(out, cls):
    """The op of class `cls` in the graph below `out` (the case's fn may reshape around it)."""
    found = next((t.op for t in topological_order(out) if isinstance(t.op, cls)), None)
    if found is None:
        raise RuntimeError(f"viz.jacobian: no {cls.__name__} op in the graph of the case's function")
    return found


def picture(name, shape=None, seed=0):
    """The picture of op `name` (a key of OPS) on a float64 input of `shape` (the case's default), drawn with
    `seed`: a JacobianPicture, its figure ready to save."""
    case = OPS[name]
    shape = tuple(shape or case.shape)
    rng = np.random.default_rng(seed)
    x, fn = case.make(shape, rng)
    title = f"{name}: {case.formula}\ninput of shape {shape}, seed {seed}"
    # the op may see x reshaped (attention's (1, 1, T, D)): its Jacobian is laid out as the case's x and output
    return _picture(fn, x, lambda out: case.closed(_found_op(out, case.op)).reshape(out.shape + shape),
                    "closed form\nfrom the op's saved values", title, rng, rule=case.op.rule,
                    note=None if case.note is None else lambda out: case.note(_found_op(out, case.op)))


def _shape(text):
    """--shape: positive sizes separated by commas ('5', '2,4')."""
    import argparse
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape: give sizes separated by commas, e.g. 2,4") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every size must be at least 1")
    if math.prod(sizes) > LARGEST:
        raise argparse.ArgumentTypeError(f"{text!r} has {math.prod(sizes)} elements; the picture is for small "
                                         f"inputs, at most {LARGEST}")
    return sizes


def main(argv=None):
    from models.cli import SEEDS, Parser, interval  # here, not at the top: draw() needs nothing from models
    from models.doors import stdout_reader_left
    from models.training.checkpoint import default_picture, picture_file
    cases = "; ".join(f"{c.name}: {c.what} (default {','.join(map(str, c.shape))})" for c in OPS.values())
    p = Parser("python -m viz.jacobian", "Draw an op's local Jacobian (ag.jacobian) as a heatmap beside the closed "
                                         "form its docstring states, computed from the op's saved values.",
               epilog=f"What --shape sets, for each op: {cases}.")
    p.add_argument("op", choices=list(OPS), help="the op to draw")
    p.add_argument("--shape", type=_shape, help="the input's shape, sizes separated by commas "
                                                "(default: the op's own, listed below)")
    p.add_argument("--seed", type=interval(int, SEEDS), default=0, help="seed of the input and of the op's other arguments")
    p.add_argument("--out", type=picture_file, help="output file, .png, .svg or .pdf "
                                                   "(default: jacobian_<op>.png in the current directory)")
    args = p.parse_args(argv)
    case = OPS[args.op]
    if args.shape is not None and len(args.shape) not in case.ndim:
        p.error(f"--shape {','.join(map(str, args.shape))}: {args.op} takes {case.what}")
    out = Path(args.out or default_picture(p, f"jacobian_{args.op}.png"))
    try:
        fmt = picture_format(out, "--out")  # x.PNG is a PNG, as viz.graph reads it; /dev/null one too
    except ValueError as exc:
        p.error(str(exc))
    drawn = picture(args.op, args.shape, args.seed)
    try:
        write_figure(out, drawn.figure, fmt)  # whole or not at all
    except OSError as exc:
        if stdout_reader_left(exc):  # `--out /dev/stdout | head` has read enough
            raise
        print(f"viz.jacobian: error: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wrote {out}: max |ag.jacobian − closed form| = {drawn.max_difference:.3g}, "
          f"max |backward(g) − gᵀJ| = {drawn.vjp_difference:.3g}")
    return 0


if __name__ == "__main__":
    from models.doors import run_main
    sys.exit(run_main(main, "viz.jacobian"))
