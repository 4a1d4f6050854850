"""Each fused CPU kernel (autograd/kernels/cpu.py) against its composed NumPy op, at the main job's and GPT-2 small's sizes.

Run from the repository root, with nothing else busy (about a minute):

    python -m benchmarks.cpu_kernels [--repeats 30]        # OMP_NUM_THREADS=N for N threads (default: every core)

Two variants of our own op, so they are interleaved in one process, in
blocks (fused, composed, fused, …: AUTOGRAD_FUSED switched between blocks)
and each median is over --repeats calls of forward + backward (AdamW: one step). Before timing, each case runs
once both ways from the same inputs (AdamW: one step from the same weights)
and prints the largest relative difference. The first call compiles the
kernels, or loads them from numba's cache: its time is printed too.
Prints; asserts nothing.

The whole training step is compared in fresh processes instead
(`AUTOGRAD_FUSED=0 python -m benchmarks.train_step` against the command
without it): once the kernels have loaded with the shared pool, OpenBLAS
keeps one thread, so the composed step's products would run on one core here.
"""
import os
import statistics
import time

import numpy as np

from benchmarks import alone

# Calls are timed in blocks of one variant (fused ×10, composed ×10, …): numba's OpenMP threads spin for a few ms
# after a kernel, which slows NumPy's single-threaded passes beside them (GELU's composed op 1.5× when each of its
# calls followed a fused one), and once asleep they take milliseconds to wake here (a fused GELU 9.5 ms instead of 1
# when each call followed a 20 ms pause). Within a block each variant runs as it does in a training loop.
BLOCKS = 3


def cases(rng):
    import autograd as ag
    import nn

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def fwd_bwd(fn, arrays):
        def run():
            tensors = [ag.Tensor(a, requires_grad=True) for a in arrays]
            out = fn(*tensors)
            out.backward(np.ones(out.shape, dtype=np.float32) if out.ndim else None)
            return [out.data] + [t.grad for t in tensors]
        return run

    def adamw(shapes):
        params = [nn.Parameter(normal(*s, scale=0.02)) for s in shapes]
        grads = [normal(*s) for s in shapes]
        opt = nn.optim.AdamW(params, lr=2e-3, betas=(0.9, 0.99), weight_decay=0.1, flat_grads=True)  # as models.train

        def run():
            opt.zero_grad()
            for p, g in zip(params, grads):
                p.grad += g  # as backward adds into the buffer's views
            nn.optim.clip_grad_norm_(params, 1.0)
            opt.step()
            return [params[0].data]
        return run

    main_job = [(128, 384), (384,), (128, 128), (128,), (128, 512), (512,), (512, 128), (128,)] * 4
    targets = rng.integers(0, 65, size=768)
    gpt2_targets = rng.integers(0, 50257, size=128)
    return [
        ("GELU (768, 512): the main job's MLP", fwd_bwd(lambda x: x.gelu(), [normal(768, 512)])),
        ("GELU (128, 3072): GPT-2 small, 1 x 128", fwd_bwd(lambda x: x.gelu(), [normal(128, 3072)])),
        ("layer norm (768, 128)", fwd_bwd(lambda x, w, b: ag.layer_norm(x, w, b),
                                          [normal(768, 128, scale=2), 1 + normal(128, scale=0.1), normal(128)])),
        ("layer norm (128, 768)", fwd_bwd(lambda x, w, b: ag.layer_norm(x, w, b),
                                          [normal(128, 768, scale=2), 1 + normal(768, scale=0.1), normal(768)])),
        ("attention, causal (12, 4, 64, 32)", fwd_bwd(lambda q, k, v: ag.scaled_dot_product_attention(q, k, v),
                                                      [normal(12, 4, 64, 32) for _ in range(3)])),
        ("attention, causal (1, 12, 128, 64)", fwd_bwd(lambda q, k, v: ag.scaled_dot_product_attention(q, k, v),
                                                       [normal(1, 12, 128, 64) for _ in range(3)])),
        ("cross-entropy (768, 65)", fwd_bwd(lambda z: ag.cross_entropy(z, targets), [normal(768, 65, scale=2)])),
        ("cross-entropy (128, 50257)", fwd_bwd(lambda z: ag.cross_entropy(z, gpt2_targets),
                                               [normal(128, 50257, scale=2)])),
        ("clip + AdamW, the main job's 0.8M weights", adamw(main_job)),
    ]


def switched(fused, run):
    def timed():
        os.environ["AUTOGRAD_FUSED"] = fused
        return run()
    return timed


def main(argv=None):
    from models.cli import Parser
    parser = Parser("python -m benchmarks.cpu_kernels", __doc__.splitlines()[0])
    parser.add_argument("--repeats", type=alone.COUNT, default=30, help="timed calls of each variant")
    args = parser.parse_args(argv)
    import autograd as ag
    from autograd.kernels import runtime
    ag.keep_freed_memory()  # as models.train does
    print(f"each fused kernel against its composed op, float32, {runtime.threads()} thread(s), "
          f"medians of {args.repeats} interleaved calls of forward + backward")
    # two builds from one seed: the first run of each (AdamW: one step from the same weights) compared
    for (name, run), (_, twin) in zip(cases(np.random.default_rng(0)), cases(np.random.default_rng(0))):
        start = time.perf_counter()
        fused = [a.copy() for a in switched("1", run)()]
        first = time.perf_counter() - start
        composed = switched("0", twin)()
        diff = max(float(np.abs(a - b).max() / (np.abs(b).max() + 1e-30)) for a, b in zip(fused, composed))
        times = {"fused": [], "composed": []}
        for _ in range(BLOCKS):
            for variant, flag in (("fused", "1"), ("composed", "0")):
                for _ in range(-(-args.repeats // BLOCKS)):
                    t = time.perf_counter()
                    switched(flag, run)()
                    times[variant].append(time.perf_counter() - t)
        f, c = statistics.median(times["fused"]), statistics.median(times["composed"])
        print(f"  {name:<44} fused {f * 1e3:7.3f} ms   composed {c * 1e3:7.3f} ms   speed-up {c / f:5.2f}x   "
              f"largest difference {diff:.1e}   first call {first * 1e3:.0f} ms")
    os.environ["AUTOGRAD_FUSED"] = "1"


if __name__ == "__main__":
    main()
