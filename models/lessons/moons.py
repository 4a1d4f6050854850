"""micrograd's demo on `Value`: an MLP 2-16-16-1 learns to separate two interleaving half-moons.

What this file promises:

* `make_moons(n, noise, seed)`: n points (NumPy, seeded) on two half-circles,
  the upper one labelled −1 and the lower one +1, with Gaussian noise: the data
  set of micrograd's demo (scikit-learn's make_moons, drawn here without it).
* `train(...)`: the demo's loop on models.value_nn's MLP: the max-margin loss
  mean relu(1 − y·score) plus 1e-4 · Σ p², full batch, SGD with a learning
  rate falling from 1.0 to 0.1, 100 steps. On the default 100 points it ends at
  100 % accuracy, as micrograd's demo does.
* `plot_boundary(...)`: the decision-boundary picture: the plane shaded by the
  side of the boundary the network puts it on, the points coloured by class.
* `demo_loss()`: the same loss for a 2-2-1 MLP on one point, a `Value` small
  enough to draw (`python -m viz.graph models.moons`).

`python -m models.moons [--steps 100] [--points 100] [--noise 0.1] [--seed 0]
[--init-seed 1337] [--log-every 10] [--out moons.png]` prints the loss and
accuracy every few steps and at the end, and writes the picture (atomically:
the old file or the new one, never half).
"""
import math

import numpy as np

from autograd.heatmaps import picture_format
from models.cli import SEEDS, Parser, counted, interval, within_memory
from models.io import write_figure
from models.training.checkpoint import figure_file
from models.lessons.value_nn import DEMO_SIZES, MLP, max_margin_loss, train_step


# A full-batch step builds about 650 Values a point (the 2-16-16-1 MLP's products, sums and ReLUs, and the margin):
# its peak was 128 KB a point (ru_maxrss, 20,000 points), and a run needs at least this much.
BYTES_PER_POINT = 120_000


def make_moons(n=100, noise=0.1, seed=0):
    """(points (n, 2), labels (n,) of ±1): half the points on each half-circle, evenly spaced along it, plus noise.

    Upper moon: (cos θ, sin θ), θ in [0, π], label −1; lower moon: (1 − cos θ, 1/2 − sin θ), label +1.
    """
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"make_moons: n must be an integer of at least 2 (a point per moon), got {n!r}")
    if not (math.isfinite(noise) and noise >= 0):
        raise ValueError(f"make_moons: noise must be a number ≥ 0 (a standard deviation), got {noise!r}")
    upper, lower = n // 2, n - n // 2
    a, b = np.linspace(0, np.pi, upper), np.linspace(0, np.pi, lower)
    points = np.concatenate([np.stack([np.cos(a), np.sin(a)], axis=1),
                             np.stack([1 - np.cos(b), 0.5 - np.sin(b)], axis=1)])
    points += np.random.default_rng(seed).normal(0.0, noise, points.shape)
    labels = np.concatenate([-np.ones(upper), np.ones(lower)])
    return points, labels


def train(model, points, labels, steps=100, on_log=None, log_every=10):
    """micrograd's training loop: `steps` full-batch steps of value_nn.train_step; returns {step: (loss, accuracy)}.

    `on_log(step, loss, accuracy)` is called every `log_every` steps and after the last update (step = steps, the
    loss and accuracy of the trained network, which no update follows).
    """
    points, labels = np.asarray(points).tolist(), np.asarray(labels).tolist()  # Values hold Python floats
    history = {}
    for step in range(steps):
        history[step] = train_step(model, points, labels, step, steps)
        if on_log and step % log_every == 0:
            on_log(step, *history[step])
    loss, accuracy = max_margin_loss(model, points, labels)
    history[steps] = (loss.data, accuracy)
    if on_log:
        on_log(steps, *history[steps])
    return history


def scores(model, xy):
    """The network's score at each row of `xy` (m, 2), computed with NumPy from the Values' data (many points fast)."""
    h = np.asarray(xy, dtype=np.float64)
    for i, layer in enumerate(model.layers):
        W = np.array([[w.data for w in n.w] for n in layer.neurons])  # (n_out, n_in)
        b = np.array([n.b.data for n in layer.neurons])
        h = h @ W.T + b
        if i < len(model.layers) - 1:
            h = np.maximum(h, 0.0)
    return h[:, 0]


def plot_boundary(path, model, points, labels, title):
    """Write the decision-boundary PNG to `path`: the plane shaded by the predicted class, the points by their own."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    classes = ((-1, "#2166ac", "#c6dbef", "o", "upper moon"), (1, "#d95f02", "#fdd0a2", "s", "lower moon"))
    low, high = points.min(axis=0) - 0.5, points.max(axis=0) + 0.5
    gx, gy = np.meshgrid(np.linspace(low[0], high[0], 400), np.linspace(low[1], high[1], 300))
    grid = scores(model, np.stack([gx.ravel(), gy.ravel()], axis=1)).reshape(gx.shape)
    fig, ax = plt.subplots(figsize=(7.5, 5.4), dpi=120)
    ax.contourf(gx, gy, grid > 0, levels=[-0.5, 0.5, 1.5], cmap=ListedColormap([c[2] for c in classes]))
    ax.contour(gx, gy, grid, levels=[0.0], colors="#333333", linewidths=1.2)
    handles = []
    for label, colour, shade, marker, moon in classes:
        mine = labels == label
        handles.append(ax.scatter(points[mine, 0], points[mine, 1], c=colour, marker=marker, s=28,
                                  edgecolors="white", linewidths=0.6, label=f"class {label:+d} ({moon})", zorder=3))
        handles.append(Patch(color=shade, label=f"predicted {label:+d} (score {'<' if label < 0 else '>'} 0)"))
    handles.append(Line2D([], [], color="#333333", linewidth=1.2, label="decision boundary (score = 0)"))
    ax.set_title(title, fontsize=11)
    ax.set_xlabel("x₁")
    ax.set_ylabel("x₂")
    ax.legend(handles=handles, loc="upper right", fontsize=8, framealpha=0.92)
    ax.set_aspect("equal")
    fig.tight_layout()
    write_figure(path, fig, picture_format(path, "path"))
    plt.close(fig)


def demo_loss():
    """The demo's loss (max margin + L2) for a 2-2-1 MLP on one point: a Value small enough for viz.graph to draw."""
    loss, _ = max_margin_loss(MLP([2, 2, 1], seed=1337), [[0.5, -0.25]], [1.0])
    loss.label = "loss"
    return loss


def main(argv=None):
    parser = Parser("python -m models.moons", __doc__.split("\n")[0])
    parser.add_argument("--steps", type=interval(int, "[0, inf)"), default=100, help="full-batch SGD steps")
    parser.add_argument("--points", type=within_memory(interval(int, "[2, inf)"), BYTES_PER_POINT, "a point"),
                        default=100, help="points in the data set")
    parser.add_argument("--noise", type=interval(float, "[0, inf)"), default=0.1,
                        help="standard deviation of the noise added to each point")
    parser.add_argument("--seed", type=interval(int, SEEDS), default=0, help="seed of the data's noise")
    parser.add_argument("--init-seed", type=int, default=1337, help="seed of the network's initial weights")
    parser.add_argument("--log-every", type=interval(int, "[1, inf)"), default=10, metavar="N",
                        help="print the loss and accuracy every N steps")
    parser.add_argument("--out", type=figure_file, default="moons.png",
                        help="where to write the picture of the decision boundary (.png, .svg or .pdf)")
    args = parser.parse_args(argv)

    points, labels = make_moons(args.points, args.noise, args.seed)
    model = MLP(DEMO_SIZES, seed=args.init_seed)
    print(f"micrograd's demo on Value: MLP {'-'.join(map(str, DEMO_SIZES))} ({len(model.parameters())} parameters), "
          f"{args.points} moons points (noise {args.noise}, seed {args.seed})")
    print(f"loss = mean relu(1 − y·score) + 1e-4·Σp², SGD with lr 1.0 → 0.1 over {counted(args.steps, 'step')}")
    history = train(model, points, labels, args.steps, log_every=args.log_every,
                    on_log=lambda step, loss, acc: print(f"  step {step:4d}  loss {loss:.4f}  accuracy {acc:.0%}"))
    loss, accuracy = history[args.steps]
    print(f"after {counted(args.steps, 'step')}: loss {loss:.4f}, accuracy {accuracy:.0%} "
          f"({round(accuracy * args.points)} of {args.points} points on the right side)")
    plot_boundary(args.out, model, points, labels,
                  f"MLP {'-'.join(map(str, DEMO_SIZES))} on {args.points} moons points after "
                  f"{counted(args.steps, 'step')}: accuracy {accuracy:.0%}")
    print(f"wrote {args.out}: the decision boundary")


if __name__ == "__main__":
    main()
