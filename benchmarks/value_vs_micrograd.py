"""Value against micrograd's own engine: micrograd's demo training step, each engine alone in its own process.

The step is the one of micrograd's demo notebook: an MLP 2-16-16-1 (ReLU) on
100 points of two interleaving half-moons, the max-margin loss averaged over
the points plus an L2 penalty, zero the grads, backward, one SGD update. The
same model code runs on both engines; only the Value class differs. Each
round starts a fresh Python process per engine, alternating which goes first,
and the medians over rounds are compared.

    pip install micrograd            # the peer (the `bench` extra)
    python -m benchmarks.value_vs_micrograd [--rounds 5] [--steps 10]

Run it alone on the machine: another busy process distorts both.
"""
import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import time

ENGINES = {"gptgrad": "autograd.value", "micrograd": "micrograd.engine"}


def half_moons(n, noise=0.1, seed=0):
    """n points of two interleaving half-circles, labels ±1 (scikit-learn's make_moons, without it)."""
    rng = random.Random(seed)
    points, labels = [], []
    for i in range(n):
        upper = i < n // 2
        angle = math.pi * rng.random()
        x, y = (math.cos(angle), math.sin(angle)) if upper else (1 - math.cos(angle), 0.5 - math.sin(angle))
        points.append((x + rng.gauss(0, noise), y + rng.gauss(0, noise)))
        labels.append(-1.0 if upper else 1.0)
    return points, labels


class MLP:
    """Layers of ReLU neurons, the last one linear: neuron j of a layer computes Σᵢ wⱼᵢ xᵢ + bⱼ."""

    def __init__(self, Value, sizes, seed=1337):
        rng = random.Random(seed)
        self.layers = [[([Value(rng.uniform(-1, 1)) for _ in range(n_in)], Value(0.0)) for _ in range(n_out)]
                       for n_in, n_out in zip(sizes[:-1], sizes[1:])]

    def __call__(self, x):
        for depth, layer in enumerate(self.layers):
            last = depth == len(self.layers) - 1
            x = [sum((w * xi for w, xi in zip(ws, x)), b) for ws, b in layer]
            x = x if last else [v.relu() for v in x]
        return x[0]

    def parameters(self):
        return [p for layer in self.layers for ws, b in layer for p in ws + [b]]


def training_step(Value, model, points, labels, step, alpha=1e-4):
    """One step of micrograd's demo: loss, zero_grad, backward, SGD with its decaying learning rate."""
    scores = [model([Value(x), Value(y)]) for x, y in points]
    margins = [(1 + -label * score).relu() for label, score in zip(labels, scores)]
    data_loss = sum(margins) * (1.0 / len(margins))
    reg_loss = alpha * sum(p * p for p in model.parameters())
    loss = data_loss + reg_loss
    for p in model.parameters():
        p.grad = 0
    loss.backward()
    lr = 1.0 - 0.9 * step / 100
    for p in model.parameters():
        p.data -= lr * p.grad
    return loss.data


def run_engine(engine, steps):
    """Time `steps` training steps of one engine in this process; the first step is a warm-up."""
    Value = __import__(ENGINES[engine], fromlist=["Value"]).Value
    points, labels = half_moons(100)
    model = MLP(Value, [2, 16, 16, 1])
    times, losses = [], []
    for step in range(steps + 1):
        start = time.perf_counter()
        losses.append(training_step(Value, model, points, labels, step))
        times.append(time.perf_counter() - start)
    return {"engine": engine, "median_ms": 1000 * statistics.median(times[1:]), "losses": losses}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per engine")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per process")
    parser.add_argument("--engine", choices=sorted(ENGINES), help=argparse.SUPPRESS)  # a child process's one engine
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be at least 1")
    if args.engine:
        print(json.dumps(run_engine(args.engine, args.steps)))
        return
    try:
        __import__("micrograd.engine")
    except ImportError:
        sys.exit("error: micrograd is not installed; pip install micrograd (or pip install -e \".[bench]\")")
    medians = {engine: [] for engine in ENGINES}
    losses = {}
    for round_ in range(args.rounds):
        order = list(ENGINES) if round_ % 2 == 0 else list(reversed(ENGINES))
        for engine in order:
            child = subprocess.run([sys.executable, "-m", "benchmarks.value_vs_micrograd", "--engine", engine,
                                    "--steps", str(args.steps)], capture_output=True, text=True, check=True)
            result = json.loads(child.stdout)
            medians[engine].append(result["median_ms"])
            losses[engine] = result["losses"]
    same = all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(losses["gptgrad"], losses["micrograd"]))
    ours, theirs = (statistics.median(medians[e]) for e in ("gptgrad", "micrograd"))
    print(f"micrograd's demo step (MLP 2-16-16-1, 100 points), median of {args.rounds} processes × {args.steps} steps")
    print(f"  gptgrad Value    {ours:8.1f} ms")
    print(f"  micrograd Value  {theirs:8.1f} ms")
    print(f"  micrograd takes {theirs / ours:.2f}× our time; same losses step by step: {same}")


if __name__ == "__main__":
    main()
