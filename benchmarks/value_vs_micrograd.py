"""Value against micrograd's own engine: micrograd's demo training step, each engine alone in its own process.

The step is the one of micrograd's demo notebook, as `python -m models.moons`
runs it (models/lessons/value_nn.py's `train_step`): an MLP 2-16-16-1 (ReLU)
on 100 points of two interleaving half-moons, the max-margin loss averaged
over the points plus an L2 penalty, zero the grads, backward, one SGD update.
The same model code runs on both engines; only the Value class differs. Each
round starts a fresh Python process per engine, alternating which goes first,
and the medians over rounds are compared. The parent draws the points
(models.moons, with NumPy) and hands them to each child on stdin, so a child
imports its own engine and models.value_nn (plain Python) alone.

    pip install micrograd            # the peer (the `bench` extra)
    python -m benchmarks.value_vs_micrograd [--rounds 5] [--steps 10]

Run it alone on the machine: another busy process distorts both. Beside the
wall-clock medians it prints CPU-time ones (time.process_time): both engines
are single-threaded Python, so the CPU time is their work, and it holds up far
better than the wall clock when the machine is shared.
"""
import argparse
import json
import math
import statistics
import subprocess
import sys
import time

from models.cli import Parser
from models.lessons.value_nn import DEMO_SIZES, MLP, train_step

ENGINES = {"gptgrad": "autograd.value", "micrograd": "micrograd.engine"}


def run_engine(engine, steps, points, labels):
    """Time `steps` training steps of one engine in this process; the first step is a warm-up."""
    Value = __import__(ENGINES[engine], fromlist=["Value"]).Value
    model = MLP(DEMO_SIZES, value=Value)
    times, cpu_times, losses = [], [], []
    for step in range(steps + 1):
        start, cpu_start = time.perf_counter(), time.process_time()
        losses.append(train_step(model, points, labels, step)[0])
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    return {"engine": engine, "median_ms": 1000 * statistics.median(times[1:]),
            "cpu_median_ms": 1000 * statistics.median(cpu_times[1:]), "losses": losses}


def main(argv=None):
    parser = Parser("python -m benchmarks.value_vs_micrograd", __doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per engine")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per process")
    parser.add_argument("--engine", choices=sorted(ENGINES), help=argparse.SUPPRESS)  # a child process's one engine
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be at least 1")
    if args.engine:  # a child: the points come on stdin, so that it imports nothing but its engine
        data = json.load(sys.stdin)
        print(json.dumps(run_engine(args.engine, args.steps, data["points"], data["labels"])))
        return
    try:
        __import__("micrograd.engine")
    except ImportError:
        sys.exit("error: micrograd is not installed; pip install micrograd (or pip install -e \".[bench]\")")
    from models.lessons.moons import make_moons  # here, in the parent: NumPy draws the points, no child imports it
    points, labels = make_moons(100)
    data = json.dumps({"points": points.tolist(), "labels": labels.tolist()})
    medians = {engine: [] for engine in ENGINES}
    cpu_medians = {engine: [] for engine in ENGINES}
    losses = {}
    for round_ in range(args.rounds):
        order = list(ENGINES) if round_ % 2 == 0 else list(reversed(ENGINES))
        for engine in order:
            child = subprocess.run([sys.executable, "-m", "benchmarks.value_vs_micrograd", "--engine", engine,
                                    "--steps", str(args.steps)], input=data, capture_output=True, text=True, check=True)
            result = json.loads(child.stdout)
            medians[engine].append(result["median_ms"])
            cpu_medians[engine].append(result["cpu_median_ms"])
            losses[engine] = result["losses"]
    same = all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(losses["gptgrad"], losses["micrograd"]))
    ours, theirs = (statistics.median(medians[e]) for e in ("gptgrad", "micrograd"))
    cpu_ours, cpu_theirs = (statistics.median(cpu_medians[e]) for e in ("gptgrad", "micrograd"))
    print(f"micrograd's demo step (MLP 2-16-16-1, 100 points), median of {args.rounds} processes × {args.steps} steps")
    print("                   wall clock    CPU time")
    print(f"  gptgrad Value    {ours:8.1f} ms  {cpu_ours:8.1f} ms")
    print(f"  micrograd Value  {theirs:8.1f} ms  {cpu_theirs:8.1f} ms")
    print(f"  micrograd takes {theirs / ours:.2f}× our time ({cpu_theirs / cpu_ours:.2f}× in CPU time); "
          f"same losses step by step: {same}")


if __name__ == "__main__":
    main()
