"""The main job's matrix products alone: one block's twelve (each Linear's y, dx and dW), ours against PyTorch's.

Run from the repository root, with nothing else busy (about half a minute):

    python -m benchmarks.products [--rounds 4] [--threads 2] [--repeats 50]

The step's products are most of its time, and they are the BLAS's, not the
engine's: ours are NumPy's OpenBLAS called on the threads' blocks
(autograd/kernels/cpu.py's `matmul`, what ops.Linear runs), PyTorch's are its
own BLAS (MKL on x86). This times each product of one transformer block at the
main job's rows (12 × 64 = 768) as Linear runs it: y = x W, dx = G Wᵀ,
dW = xᵀ G (ours: the last two in one call, `matmul_pair`), for c_attn,
attn.c_proj, c_fc and mlp.c_proj. Each peer runs alone in its fresh process;
printed: each peer's time for the twelve, their rate in GFLOP/s, and ours
against PyTorch's. `--threads 1` compares the two BLAS libraries' kernels core
for core. Prints; asserts nothing.
"""
import numpy as np

from benchmarks import alone, train_step

PEERS = ["ours", "torch"]
ROWS, C = 768, 128
LINEARS = [(C, 3 * C), (C, C), (C, 4 * C), (4 * C, C)]  # (in, out): c_attn, attn.c_proj, c_fc, mlp.c_proj


def products(peer):
    """A function that runs the block's twelve products once, and their multiply-adds."""
    rng = np.random.default_rng(0)
    shapes = [((ROWS, n_in), (n_in, n_out), (ROWS, n_out)) for n_in, n_out in LINEARS]  # x, W, G of each Linear
    arrays = [tuple(rng.standard_normal(shape).astype(np.float32) for shape in triple) for triple in shapes]
    if peer == "ours":
        from autograd import kernels
        kernels.share_cpu_threads(alone.threads())
        matmul = kernels.fused("matmul", arrays[0][1])  # Linear's products as it finds them: numba loaded, threads set
        pair = kernels.fused("matmul_pair", arrays[0][1])
    else:
        import torch
        torch.set_num_threads(alone.threads())
        arrays = [tuple(torch.from_numpy(a) for a in triple) for triple in arrays]
        matmul = torch.mm
        pair = None

    def run():
        for x, w, g in arrays:
            matmul(x, w)  # y = x W
            if pair:  # ours: backward's two in one pass over the threads, as Linear runs them
                pair(g, w.T, x.T, g)
            else:
                matmul(g, w.T)  # dx = G Wᵀ
                matmul(x.T, g)  # dW = xᵀ G
    return run, 3 * sum(ROWS * n_in * n_out for n_in, n_out in LINEARS)


def measure(peer, repeats):
    run, macs = products(peer)
    _, median = train_step.median_seconds(run, repeats, warmup=5)
    return {"ms": median * 1e3, "gflops": 2 * macs / median / 1e9}


def main(argv=None):
    p = alone.parser("python -m benchmarks.products", __doc__.splitlines()[0], PEERS, rounds=4)
    p.add_argument("--repeats", type=alone.COUNT, default=50, help="timed runs of the twelve products per process")
    args = p.parse_args(argv)
    if args.peer:
        alone.emit(args.peer, measure(args.peer, args.repeats))
        return
    results = alone.run("benchmarks.products", args, argv)
    print(f"one block's 12 products at {ROWS} rows, {args.threads} thread(s)")
    alone.report(results, "ms", "time", "ms", digits=3, memory=False)
    alone.report(results, "gflops", "rate", "GFLOP/s", higher_is_better=True, memory=False)


if __name__ == "__main__":
    main()
