"""Per-op overhead: a 200-op chain on 8×8 float32 tensors, forward + backward, µs per op.

At this size the arithmetic is nearly free, so the time is the engine's own
cost per op: building the graph node, dispatching, and running the VJP.
Printed beside raw NumPy (forward only: the floor) and, when installed,
PyTorch CPU eager doing the same forward + backward, measured interleaved in
the same process. Run it alone: `python benchmarks/overhead.py`.
"""
import argparse
import statistics
import time

import numpy as np

import autograd as ag

OPS_PER_ROUND = 4  # matmul, add, tanh, mul


def chain_ours(x, w, b, s, rounds):
    h = x
    for _ in range(rounds):
        h = ((h @ w) + b).tanh() * s
    h.sum().backward()


def chain_numpy(x, w, b, s, rounds):
    h = x
    for _ in range(rounds):
        h = np.tanh((h @ w) + b) * s


def chain_torch(torch, x, w, b, s, rounds):
    h = x
    for _ in range(rounds):
        h = torch.tanh((h @ w) + b) * s
    h.sum().backward()


def timed(fn, *args):
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=200, help="ops in the chain")
    parser.add_argument("--repeats", type=int, default=200, help="timed runs of each peer")
    args = parser.parse_args()
    rounds = args.ops // OPS_PER_ROUND
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((8, 8)).astype(np.float32) * 0.3 for _ in range(4)]
    ours = [ag.Tensor(a, requires_grad=True) for a in arrays]
    try:
        import torch
        torch.set_num_threads(1)
        theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    except ImportError:
        torch = None

    times = {"ours": [], "numpy": [], "torch": []}
    for _ in range(args.repeats):  # interleaved, so drift in machine load hits every peer alike
        for t in ours:
            t.grad = None
        times["ours"].append(timed(chain_ours, *ours, rounds))
        times["numpy"].append(timed(chain_numpy, *arrays, rounds))
        if torch is not None:
            for t in theirs:
                t.grad = None
            times["torch"].append(timed(chain_torch, torch, *theirs, rounds))

    n_ops = rounds * OPS_PER_ROUND + 1  # + the final sum
    per_op = {k: statistics.median(v) / n_ops * 1e6 for k, v in times.items() if v}
    print(f"{n_ops}-op chain on 8×8 float32, median of {args.repeats} runs, µs per op")
    print(f"  numpy forward only          {per_op['numpy']:7.2f}")
    print(f"  ours forward + backward     {per_op['ours']:7.2f}")
    if "torch" in per_op:
        print(f"  pytorch forward + backward  {per_op['torch']:7.2f}")
        print(f"ratio ours / pytorch: {per_op['ours'] / per_op['torch']:.2f}x  (target <= 2x)")
    else:
        print("PyTorch is not installed: no ratio (pip install torch==2.13.0)")


if __name__ == "__main__":
    main()
