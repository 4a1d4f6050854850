"""GPU: our engine on CuPy against PyTorch CUDA eager, each alone in its own process, and our fused kernels.

Run on a machine with a GPU, CuPy and PyTorch for CUDA, from the repository root:
    python -m benchmarks.gpu [--steps N] [--batch B] [--seq T] [--rounds R]

(1) The training step of GPT-2 small at batch 8 × 1024 tokens, float32 with
    TF32 matrix products allowed on both sides, AdamW and gradient clipping:
    benchmarks.gpt2 with --device cuda, plus tokens/s and model-FLOPs
    utilisation (target: ours at least 50 % of PyTorch's throughput).
(2) Greedy generation with the KV cache, GPT-2 small, batch 1, 256 new tokens after 16:
    benchmarks.generate --model gpt2 --device cuda, ours (the static cache's
    decode step captured as a CUDA graph, replayed per token) against the same
    kernels launched one by one, our dynamic cache, PyTorch eager with its own
    cache and transformers' generate; ours must agree on the tokens
    (target: ours >= 1.5x PyTorch eager).
(3) Each fused CUDA kernel (GELU forward + backward, the AdamW step) against
    the composed version of its op (AUTOGRAD_FUSED=0): two variants of our own code, so
    these are interleaved in this one process. A kernel stays only if it wins.
Prints; asserts nothing.
"""
import argparse
import os

os.environ.setdefault("CUPY_TF32", "1")  # before CuPy loads; the peer processes inherit it (PyTorch follows it)

import statistics  # noqa: E402
import time  # noqa: E402

from benchmarks import alone, generate, gpt2  # noqa: E402
from models.cli import Parser  # noqa: E402


def peak_flops():
    """TF32 matmul FLOP/s of this GPU through CuPy: the yardstick for model-FLOPs utilisation."""
    from autograd import backend
    cp = backend.xp_for("cuda")
    a = cp.ones((8192, 8192), dtype=cp.float32)
    (a @ a)[0, 0].item()
    start = time.perf_counter()
    for _ in range(5):
        c = a @ a
    c[0, 0].item()
    return 5 * 2 * 8192 ** 3 / (time.perf_counter() - start)


def interleaved(runs, repeats):
    """Median seconds of each named callable, alternating between them, after one untimed call each."""
    for run in runs.values():
        run()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def kernels():
    import autograd as ag
    import nn
    from autograd import backend
    cp = backend.xp_for("cuda")

    def switched(fused, run):
        def timed():
            os.environ["AUTOGRAD_FUSED"] = fused
            return run()
        return timed

    x = ag.Tensor(cp.random.standard_normal((8 * 1024, 3072), dtype=cp.float32), requires_grad=True)
    g = cp.ones(x.shape, dtype=cp.float32)

    def gelu():
        x.grad = None
        x.gelu().backward(g)
        return x.grad[0, 0].item()
    # GPT-2 small's parameter shapes, one layer's worth twelve times over: 85M weights
    shapes = [(768, 2304), (2304,), (768, 768), (768,), (768, 3072), (3072,), (3072, 768), (768,)] * 12
    params = [nn.Parameter(cp.random.standard_normal(shape, dtype=cp.float32)) for shape in shapes]
    for p in params:
        p.grad = cp.random.standard_normal(p.shape, dtype=cp.float32)
    opt = nn.optim.AdamW(params, lr=1e-4)

    def adamw():
        opt.step()
        return params[0].data[0, 0].item()
    for name, run, what in (("GELU", gelu, "forward + backward on (8192, 3072) float32"),
                            ("AdamW", adamw, f"step over {sum(p.size for p in params) / 1e6:.0f}M parameters")):
        medians = interleaved({"fused": switched("1", run), "composed": switched("0", run)}, 20)
        print(f"(3) {name} {what}, our two variants interleaved in one process")
        for variant, seconds in medians.items():
            print(f"    {variant:<9} {seconds * 1e3:7.2f} ms")
        print(f"    fused kernel speed-up: {medians['composed'] / medians['fused']:.2f}x (keep it only if > 1)")
    os.environ["AUTOGRAD_FUSED"] = "1"


def main(argv=None):
    parser = Parser("python -m benchmarks.gpu", __doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per process")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2, help="fresh processes per peer")
    parser.add_argument("--peak-tflops", type=float, default=None, help="default: measured TF32 matmul rate")
    args = parser.parse_args(argv)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else peak_flops()  # a clear error without CuPy or a GPU
    print(f"GPU peak for MFU: {peak / 1e12:.0f} TFLOP/s (TF32 matmul)")

    step_argv = ["--device", "cuda", "--batch", str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps),
                 "--rounds", str(args.rounds)]
    step_args = argparse.Namespace(peers=",".join(gpt2.PEERS), rounds=args.rounds, threads=2)
    print(f"(1) training step, GPT-2 small, batch {args.batch} x {args.seq}, float32 + TF32, AdamW")
    results = alone.run("benchmarks.gpt2", step_args, step_argv)
    medians = alone.report(results, "step_s", "    time per step", "ms", scale=1e3)
    n_params = 124_439_808
    flops_per_token = 6 * n_params + 12 * gpt2.GPT2_SMALL["n_layer"] * gpt2.GPT2_SMALL["n_embd"] * args.seq
    rate = {peer: args.batch * args.seq / (ms / 1e3) for peer, ms in medians.items()}
    for peer, tokens_per_s in rate.items():
        print(f"    {peer:<8} {tokens_per_s:10,.0f} tokens/s   MFU {tokens_per_s * flops_per_token / peak:6.1%}")
    print(f"    ours / torch throughput: {rate['ours'] / rate['torch']:.1%}  (target >= 50%)")

    print("(2) generation")
    generate.main(["--model", "gpt2", "--device", "cuda", "--new-tokens", str(args.new_tokens),
                   "--rounds", str(args.rounds), "--peers", ",".join(generate.PEERS)])
    kernels()


if __name__ == "__main__":
    main()
