"""One training step of the main job's model, ours against PyTorch, each alone in its own process.

Run from the repository root, with nothing else busy:

    python -m benchmarks.train_step [--rounds 4] [--steps 30] [--threads 2]

The step is what `python -m models.train` does per iteration with its
defaults: forward and loss on a 12 × 64 batch of token ids, zero_grad,
backward, clip_grad_norm_(1.0), AdamW (lr 2e-3, betas (0.9, 0.99), weight
decay 0.1 on the 2-D weights) — for the default GPT (4 layers, 4 heads, 128
wide, vocabulary 65), float32. The PyTorch peer is benchmarks/torch_reference.py.
Each process builds its model, runs 3 untimed steps, then times --steps steps;
the figure is the median over the rounds of each process's median. Peak RSS is
that whole process's. Prints; asserts nothing.
"""
import os
import statistics
import time

import numpy as np

from benchmarks import alone

PEERS = ["ours", "torch"]
SHAPE = dict(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128)
BATCH = 12
LR, BETAS, WEIGHT_DECAY, CLIP = 2e-3, (0.9, 0.99), 0.1, 1.0


def random_batch(vocab_size, batch, seq, seed=0):
    tokens = np.random.default_rng(seed).integers(0, vocab_size, size=(batch, seq + 1))
    return np.ascontiguousarray(tokens[:, :-1]), np.ascontiguousarray(tokens[:, 1:])


def ours_runs(shape, batch, seq, device="cpu"):
    """{"step": one full training step, "fwd_bwd": forward + backward alone} on one GPT of ours; each returns the loss."""
    import autograd as ag
    import nn
    from models.gpt.gpt2 import GPT, GPTConfig

    ag.keep_freed_memory()  # as models.train does: the step's time without page faults
    ag.manual_seed(0)
    model = GPT(GPTConfig(**shape)).to(device)
    cuda = device == "cuda"
    model.pad_vocab(64 if cuda else 1)  # as models.train does on each device: a padded vocabulary, one flat grad buffer
    opt = nn.optim.AdamW(model.optimizer_groups(WEIGHT_DECAY), lr=LR, betas=BETAS, flat_grads=True)
    x, y = (ag.Tensor(a, device=device) for a in random_batch(shape["vocab_size"], batch, seq))

    def fwd_bwd():
        _, loss = model(x, y, return_logits=False)
        opt.zero_grad()
        loss.backward()
        return loss

    def step():
        loss = fwd_bwd()
        nn.optim.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        return loss.item()
    return {"step": step, "fwd_bwd": lambda: fwd_bwd().item()}


def torch_runs(shape, batch, seq, device="cpu"):
    """The same on benchmarks/torch_reference.py's GPT."""
    import torch
    from benchmarks.torch_reference import GPT

    torch.set_num_threads(alone.threads())
    if device == "cuda":  # TF32 matmuls exactly when CuPy's are allowed them (benchmarks/gpu.py sets CUPY_TF32)
        torch.backends.cuda.matmul.allow_tf32 = os.environ.get("CUPY_TF32") == "1"
    torch.manual_seed(0)
    model = GPT(**shape).to(device)
    opt = model.optimizer(lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)
    x, y = (torch.from_numpy(a).to(device) for a in random_batch(shape["vocab_size"], batch, seq))

    def fwd_bwd():
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        return loss

    def step():
        loss = fwd_bwd()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        return loss.item()
    return {"step": step, "fwd_bwd": lambda: fwd_bwd().item()}


def median_seconds(run, steps, warmup=3):
    """The first result, and the median wall time of `steps` calls after `warmup` untimed ones."""
    first = run()
    for _ in range(warmup - 1):
        run()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def main(argv=None):
    parser = alone.parser("python -m benchmarks.train_step", __doc__.splitlines()[0], PEERS, rounds=4)
    parser.add_argument("--steps", type=alone.COUNT, default=30, help="timed steps per process")
    args = parser.parse_args(argv)
    if args.peer:
        runs = (ours_runs if args.peer == "ours" else torch_runs)(SHAPE, BATCH, SHAPE["block_size"])
        first_loss, seconds = median_seconds(runs["step"], args.steps)
        alone.emit(args.peer, {"step_s": seconds, "first_loss": first_loss})
        return
    print(f"training step of the main job's GPT (4 layers, 4 heads, 128 wide, vocabulary 65), batch {BATCH} x "
          f"{SHAPE['block_size']}, AdamW + clipping, float32; {args.threads} thread(s) per peer, "
          f"{args.steps} timed steps per process")
    results = alone.run("benchmarks.train_step", args, argv)
    alone.report(results, "step_s", "time per step", "ms", scale=1e3)
    alone.report_memory(results)
    print("  first-step loss, each peer from its own random init (ln 65 = 4.17): "
          + ", ".join(f"{peer} {rs[0]['first_loss']:.4f}" for peer, rs in results.items()))


if __name__ == "__main__":
    main()
