"""Newton's method without a Hessian: lesson 1's bigram trained by Hessian-vector products, beside gradient descent.

The gradient g = ∇L is itself a computation, so with create_graph=True it is
a graph, and one more backward through it, seeded with a vector v, gives
∇(g · v) = H v: the Hessian times v, without the Hessian (240 × 240 here, and
(#parameters)² in general). Conjugate gradients needs nothing else to solve
Newton's equation (H + λI) p = −g, one H v per iteration; λ, the damping,
shrinks while the quadratic model predicts the loss well and grows when it
does not (Levenberg-Marquardt), and a step that would raise the loss is refused.

What this file promises:

* `hessian_vector_product(grads, params, v)`: H v by a backward through the
  gradient's graph; `conjugate_gradients(...)`: the CG solve, which stops at
  negative curvature (H is indefinite at a saddle: a model with E·W_U has them).
* `newton(...)` and `gradient_descent(...)`: the two methods on the lesson's
  set-up (E ∈ ℝ^{15×8}, W_U ∈ ℝ^{8×15}, float64, its 36 pairs), each returning
  its history: (step, backward passes so far, loss). A pass is one backward:
  a gradient's, or a Hessian-vector product's through the gradient's graph.
* The default run: gradient descent with the lesson's lr 1.0 for 500 steps ends
  at 0.6557 (the lesson's figure), 0.0026 above the counting bound 0.6530;
  Newton-CG is below that after 15 steps and 0.0002 above the bound after 20.
  Per pass of backward, descent leads at first and Newton near the minimum.
* `demo_loss()`: the bigram's own step-0 loss, so `python -m viz.graph models.newton
  --double W_U` draws the gradient graph the Hessian-vector products go through.

`python -m models.newton [--gd-steps 500] [--lr 1.0] [--newton-steps 20]
[--cg-iters 20] [--damping 1.0] [--out newton.png]` prints both runs, checks
one H v against finite differences of the gradient, and writes the picture of
both losses above the bound, by step and by pass (atomically).
"""
import math
import sys

import numpy as np

import autograd as ag
from autograd.heatmaps import picture_format
from models.lessons.bigram import Diverged, counting_lower_bound, demo_loss, lesson_setup  # noqa: F401 (demo_loss: viz's)
from models.cli import Parser, counted, interval
from models.io import write_figure
from models.training.checkpoint import figure_file
from models.numbers import fixed, section


def _dot(a, b):
    """⟨a, b⟩ over a list of arrays (one per parameter)."""
    return sum(float((x * y).sum()) for x, y in zip(a, b))


def hessian_vector_product(grads, params, v):
    """H v, one array per parameter: the backward of g · v through the graph of g = ∇L (create_graph=True),
    which it keeps for the next product."""
    return [h.data for h in ag.grad(grads, params, grad_outputs=v, retain_graph=True)]


def conjugate_gradients(hvp, b, damping, iterations, tolerance=1e-10):
    """(p, products): p ≈ (H + λI)⁻¹ b by conjugate gradients, `hvp(v)` giving H v; it stops early at tolerance or
    at a direction of negative curvature (dᵀ(H + λI)d ≤ 0), where a quadratic has no minimum to head for."""
    p = [np.zeros_like(x) for x in b]
    r = [x.copy() for x in b]  # residual b − (H + λI) p, with p = 0
    d = [x.copy() for x in r]
    rr, products = _dot(r, r), 0
    for _ in range(iterations):
        hd = [h + damping * x for h, x in zip(hvp(d), d)]
        products += 1
        curvature = _dot(d, hd)
        if curvature <= 0:
            break
        step = rr / curvature
        p = [x + step * y for x, y in zip(p, d)]
        r = [x - step * y for x, y in zip(r, hd)]
        rr, previous = _dot(r, r), rr
        if math.sqrt(rr) < tolerance:
            break
        d = [x + (rr / previous) * y for x, y in zip(r, d)]
    return p, products


def newton(model, cur, nxt, steps=20, cg_iterations=20, damping=1.0, on_step=None):
    """Damped Newton-CG; returns [(step, passes, loss)], one row per step and one after the last.

    Each step: g = ∇L with its graph (one pass); CG on (H + λI) p = −g (a pass per H v); one more H p for the
    reduction the quadratic model predicts, −(g·p + ½ pᵀHp), which the new loss is compared with: λ is
    multiplied by ⅔ when it came true (ratio above ¾) and by 1.5 when it did not (below ¼), and a step that
    raised the loss is undone.
    """
    params = model.parameters()
    history, passes = [], 0
    for step in range(steps):
        loss = ag.cross_entropy(model(cur), nxt)
        history.append((step, passes, loss.item()))  # the passes it took to get here
        if on_step is not None:
            on_step(step, passes, loss.item(), damping)
        grads = ag.grad(loss, params, create_graph=True)
        passes += 1
        g = [x.data for x in grads]
        hvp = lambda v: hessian_vector_product(grads, params, v)  # noqa: E731
        p, products = conjugate_gradients(hvp, [-x for x in g], damping, cg_iterations)
        predicted = -(_dot(g, p) + 0.5 * _dot(p, hvp(p)))
        passes += products + 1
        before = [x.data for x in params]
        for x, s in zip(params, p):
            x.data = x.data + s
        with ag.no_grad():
            after = ag.cross_entropy(model(cur), nxt).item()
        ratio = (loss.item() - after) / predicted if predicted > 0 else -1.0
        if ratio < 0:  # the loss rose: stay, and trust the quadratic less
            for x, old in zip(params, before):
                x.data = old
        damping *= 2 / 3 if ratio > 0.75 else 1.5 if ratio < 0.25 else 1.0
    with ag.no_grad():
        history.append((steps, passes, ag.cross_entropy(model(cur), nxt).item()))
    return history


def gradient_descent(model, cur, nxt, steps=500, lr=1.0):
    """Full-batch gradient descent, the lesson's; returns [(step, passes, loss)] (a pass per step). A loss that
    turns NaN or infinite, or grows past 10 × the first, raises bigram's Diverged (the lesson's own rule)."""
    params, history = model.parameters(), []
    with np.errstate(over="ignore", invalid="ignore"):  # reported as Diverged, not as NumPy's warnings
        for step in range(steps + 1):
            loss = ag.cross_entropy(model(cur), nxt)
            value = loss.item()
            if not math.isfinite(value) or history and value > 10 * history[0][2]:
                raise Diverged(step, value, lr)
            history.append((step, step, value))
            if step < steps:
                for x, g in zip(params, ag.grad(loss, params)):
                    x.data = x.data - lr * g.data
    return history


def finite_difference_check(model, cur, nxt, seed=0, eps=1e-5):
    """(H v by two backward passes, (∇L(θ + εv) − ∇L(θ − εv)) / 2ε) for a random v, at the model's θ."""
    params = model.parameters()
    v = [np.random.default_rng(seed).standard_normal(x.shape) for x in params]
    grads = ag.grad(ag.cross_entropy(model(cur), nxt), params, create_graph=True)
    exact = hessian_vector_product(grads, params, v)
    shifted = []
    for sign in (1, -1):
        for x, u in zip(params, v):
            x.data = x.data + sign * eps * u
        shifted.append([g.data for g in ag.grad(ag.cross_entropy(model(cur), nxt), params)])
        for x, u in zip(params, v):
            x.data = x.data - sign * eps * u
    return exact, [(a - b) / (2 * eps) for a, b in zip(*shifted)]


def plot_losses(path, runs, bound, title):
    """Write the PNG: each run's loss above the bound (log scale), against steps on the left and passes on the right."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), dpi=120, sharey=True)
    styles = {"gradient descent": ("#2166ac", "-", None), "Newton-CG": ("#d95f02", "-", "o")}
    for ax, column, label in ((axes[0], 0, "step"),
                              (axes[1], 1, "backward passes (a gradient or one Hessian-vector product each)")):
        for name, history in runs.items():
            colour, line, marker = styles[name]
            rows = np.array(history)
            ax.semilogy(rows[:, column], rows[:, 2] - bound, line, color=colour, marker=marker, markersize=3,
                        linewidth=1.6, label=name)
        ax.set_xlabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("loss − counting lower bound")
    axes[0].set_xscale("symlog", linthresh=1)  # steps 0 to 1 linear, then a log axis: 20 steps beside 500
    axes[0].legend(fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    write_figure(path, fig, picture_format(path, "path"))
    plt.close(fig)


def main(argv=None):
    parser = Parser("python -m models.newton", __doc__.split("\n")[0])
    parser.add_argument("--gd-steps", type=interval(int, "[0, inf)"), default=500, help="gradient-descent steps")
    parser.add_argument("--lr", type=interval(float, "(0, inf)"), default=1.0, help="gradient descent's rate")
    parser.add_argument("--newton-steps", type=interval(int, "[0, inf)"), default=20, help="Newton-CG steps")
    parser.add_argument("--cg-iters", type=interval(int, "[1, inf)"), default=20,
                        help="conjugate-gradient iterations (Hessian-vector products) per Newton step at most")
    parser.add_argument("--damping", type=interval(float, "(0, inf)"), default=1.0,
                        help="the damping λ of (H + λI) p = −g to start from")
    parser.add_argument("--out", type=figure_file, default="newton.png",
                        help="where to write the picture of both losses (.png, .svg or .pdf)")
    args = parser.parse_args(argv)

    model, chars, cur, nxt = lesson_setup()
    bound = counting_lower_bound(cur, nxt, len(chars))
    section("Hessian-vector products", "H v from two backward passes, never H itself")
    exact, numeric = finite_difference_check(model, cur, nxt)
    size = sum(x.size for x in model.parameters())
    print(f"  {size} parameters (E 15×8, W_U 8×15): H would be {size}×{size}; H v is two backward passes:")
    print("  g = ag.grad(loss, params, create_graph=True), then ag.grad(g, params, grad_outputs=v)")
    worst = max(float(np.abs(a - b).max()) for a, b in zip(exact, numeric))
    print(f"  against (∇L(θ + εv) − ∇L(θ − εv)) / 2ε for a random v: largest difference {fixed(worst, 3)}"
          f" (‖H v‖ = {fixed(math.sqrt(_dot(exact, exact)), 4)})")

    section("gradient descent", f"lr {args.lr}, {counted(args.gd_steps, 'full-batch step')}, one backward pass each")
    try:
        descent = gradient_descent(lesson_setup()[0], cur, nxt, args.gd_steps, args.lr)
    except Diverged as exc:
        sys.exit(f"error: {exc}")
    for step, _, loss in descent:
        if step % 100 == 0 or step == args.gd_steps:
            print(f"  step {step:4d}  loss {loss:.4f}  above the bound {fixed(loss - bound, 4)}")

    section("Newton-CG",
            f"(H + λI) p = −g by ≤ {counted(args.cg_iters, 'CG iteration')} a step, λ from {args.damping}")
    newton_run = newton(lesson_setup()[0], cur, nxt, args.newton_steps, args.cg_iters, args.damping,
                        on_step=lambda step, passes, loss, damping: print(
                            f"  step {step:4d}  loss {loss:.4f}  above the bound {fixed(loss - bound, 4)}"
                            f"  λ {damping:.3g}  passes {passes}"))
    step, passes, loss = newton_run[-1]
    print(f"  step {step:4d}  loss {loss:.4f}  above the bound {fixed(loss - bound, 4)}  passes {passes}")

    section("side by side", "the same loss, the counting lower bound beneath both")
    gd_final = descent[-1][2]
    beats = next((s for s, _, l in newton_run if l < gd_final), None)
    print(f"  counting lower bound {bound:.4f}; gradient descent ends at {gd_final:.4f} after "
          f"{counted(args.gd_steps, 'pass', 'passes')}, Newton-CG at {loss:.4f} after {passes}")
    if beats is not None:
        print(f"  Newton-CG is below descent's final loss from step {beats}, "
              f"after {counted(next(p for s, p, _ in newton_run if s == beats), 'pass', 'passes')}")
    plot_losses(args.out, {"gradient descent": descent, "Newton-CG": newton_run}, bound,
                f"lesson 1's bigram (d = 8): gradient descent (lr {args.lr}) beside Newton-CG "
                f"by Hessian-vector products")
    print(f"wrote {args.out}: both losses above the bound, by step and by backward pass")


if __name__ == "__main__":
    main()
