"""Per-op overhead: a 200-op chain on 8×8 float32 tensors, forward + backward, µs per op, each peer alone in its process.

Run from the repository root, with nothing else busy:

    python -m benchmarks.overhead [--rounds 4] [--repeats 200]

At this size the arithmetic is nearly free, so the time is the engine's own
cost per op: recording the graph node, dispatching, and running the VJP.
Peers: ours and PyTorch CPU eager doing forward + backward, and raw NumPy
doing the forward alone (the floor). Each process runs the chain --repeats
times; the figure is the median over the rounds of each process's median.
Prints; asserts nothing.
"""
import statistics
import time

import numpy as np

from benchmarks import alone
from models.cli import interval

PEERS = ["ours", "torch", "numpy"]
OPS_PER_ROUND = 4  # matmul, add, tanh, mul


def chain(peer, rounds):
    """A function that runs the chain once (forward + backward, or NumPy's forward)."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((8, 8)).astype(np.float32) * 0.3 for _ in range(4)]
    if peer == "numpy":
        def forward():
            h, w, b, s = arrays
            for _ in range(rounds):
                h = np.tanh((h @ w) + b) * s
        return forward
    if peer == "ours":
        import autograd as ag
        ag.keep_freed_memory()  # as models.train does
        tensors = [ag.Tensor(a, requires_grad=True) for a in arrays]
    else:
        import torch
        torch.set_num_threads(alone.threads())
        tensors = [torch.tensor(a, requires_grad=True) for a in arrays]

    def forward_backward():
        for t in tensors:
            t.grad = None
        h, w, b, s = tensors
        for _ in range(rounds):
            h = ((h @ w) + b).tanh() * s
        h.sum().backward()
    return forward_backward


def main(argv=None):
    parser = alone.parser("python -m benchmarks.overhead", __doc__.splitlines()[0], PEERS, rounds=4)
    parser.add_argument("--ops", type=interval(int, f"[{OPS_PER_ROUND}, inf)"), default=200,
                        help=f"ops in the chain, before its final sum (a multiple of {OPS_PER_ROUND}: rounded down)")
    parser.add_argument("--repeats", type=alone.COUNT, default=200, help="timed runs of the chain per process")
    args = parser.parse_args(argv)
    rounds = args.ops // OPS_PER_ROUND
    n_ops = rounds * OPS_PER_ROUND + 1  # + the final sum
    if args.peer:
        run = chain(args.peer, rounds)
        run()
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        alone.emit(args.peer, {"us_per_op": statistics.median(times) / n_ops * 1e6})
        return
    print(f"a chain of {n_ops - 1} ops and its sum on 8x8 float32, {args.repeats} runs per process; numpy is the "
          "forward alone")
    results = alone.run("benchmarks.overhead", args, argv)
    alone.report(results, "us_per_op", "time per op, forward + backward", "us/op", digits=2, memory=False)


if __name__ == "__main__":
    main()
