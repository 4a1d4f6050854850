"""Fine-tuning GPT-2 small on a laptop: LoRA against a full fine-tune and against PyTorch, and what checkpointing
every block saves; each peer alone in its own process.

Run from the repository root, with nothing else busy:

    python -m benchmarks.lora [--rounds 1] [--steps 2] [--threads 2]

Every peer builds GPT-2 small's shapes with random weights (float32; no real
checkpoint is downloaded here) and times training steps (forward, backward,
clipping, AdamW) after one untimed step:

    ours-full    a full fine-tune, 4 x 128 tokens: AdamW moments for all 124M parameters
    ours-lora    LoRA r = 8, alpha 16, on every c_attn (nn.lora), 4 x 128 tokens: moments for the adapters alone
    torch-lora   the same LoRA in PyTorch on benchmarks/torch_reference.py's GPT, 4 x 128 tokens
    ours-512     ours-lora at 4 x 512 tokens
    ours-512-ck  the same with every block checkpointed (ag.checkpoint via GPT's checkpoint_blocks)

Prints each peer's median step time and peak resident memory, the optimizer
state's size, and the ratios the targets are about. Asserts nothing.
"""
import numpy as np

from benchmarks import alone
from benchmarks.train_step import median_seconds, random_batch

PEERS = ["ours-full", "ours-lora", "torch-lora", "ours-512", "ours-512-ck"]
GPT2_SMALL = dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
BATCH, R, ALPHA, LR = 4, 8, 16.0, 1e-4


def ours_step(peer):
    """One training step of ours as `peer` says, and the optimizer state's size in bytes after it."""
    import autograd as ag
    import nn
    from models.gpt.gpt2 import GPT, GPTConfig

    ag.keep_freed_memory()
    ag.manual_seed(0)
    model = GPT(GPTConfig(**GPT2_SMALL))
    if peer != "ours-full":
        nn.lora(model, R, ALPHA, ["c_attn"])
    model.transformer.checkpoint_blocks = peer.endswith("-ck")
    opt = nn.optim.AdamW(model.optimizer_groups(0.0), lr=LR)
    seq = 512 if "512" in peer else 128
    x, y = (ag.Tensor(a) for a in random_batch(GPT2_SMALL["vocab_size"], BATCH, seq))

    def step():
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        nn.optim.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        return loss.item()

    def state_bytes():
        return sum(b.nbytes for s in opt.state_dict()["state"].values() for b in s.values() if hasattr(b, "nbytes"))
    return step, state_bytes


def torch_step():
    """The same LoRA step in PyTorch: frozen (in, out) weights plus x @ A @ B · alpha/r on every c_attn."""
    import torch
    from benchmarks.torch_reference import GPT

    torch.set_num_threads(alone.threads())
    torch.manual_seed(0)
    model = GPT(**GPT2_SMALL)
    for p in model.parameters():
        p.requires_grad_(False)
    adapters = []
    for block in model.transformer.h:
        base = block.attn.c_attn
        a = torch.nn.Parameter(torch.empty(base.weight.shape[0], R).uniform_(-1, 1) / base.weight.shape[0] ** 0.5)
        b = torch.nn.Parameter(torch.zeros(R, base.weight.shape[1]))
        adapters += [a, b]
        base.forward = (lambda base, a, b: lambda x: torch.addmm(base.bias, x.reshape(-1, x.shape[-1]),
                                                                 base.weight).view(*x.shape[:-1], -1)
                        + (x @ a) @ b * (ALPHA / R))(base, a, b)
    opt = torch.optim.AdamW(adapters, lr=LR, weight_decay=0.0)
    x, y = (torch.from_numpy(a) for a in random_batch(GPT2_SMALL["vocab_size"], BATCH, 128))

    def step():
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(adapters, 1.0)
        opt.step()
        return loss.item()

    def state_bytes():
        return sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if t.ndim)
    return step, state_bytes


def main(argv=None):
    parser = alone.parser("python -m benchmarks.lora", __doc__.split("\n\n")[0], PEERS, rounds=1)
    parser.add_argument("--steps", type=alone.COUNT, default=2, help="timed steps per process")
    args = parser.parse_args(argv)
    if args.peer:
        step, state_bytes = torch_step() if args.peer == "torch-lora" else ours_step(args.peer)
        loss, seconds = median_seconds(step, args.steps, warmup=1)
        alone.emit(args.peer, {"step_s": seconds, "first_loss": loss, "state_mb": state_bytes() / 2 ** 20})
        return
    print(f"GPT-2 small shapes, random weights, float32, batch {BATCH}; LoRA r = {R} on c_attn; "
          f"{args.threads} thread(s) per peer, {args.steps} timed steps per process")
    results = alone.run("benchmarks.lora", args, argv)
    medians = alone.report(results, "step_s", "time per training step", "ms", scale=1e3, ours="ours-lora")
    peaks = {peer: max(r["peak_rss_mb"] for r in rs) for peer, rs in results.items()}
    for peer, rs in results.items():
        print(f"  {peer:<14}optimizer state {np.median([r['state_mb'] for r in rs]):9.2f} MB")
    if {"ours-lora", "ours-full"} <= set(medians):
        print(f"  LoRA step / full step: {medians['ours-lora'] / medians['ours-full']:.2f}x the time")
    if {"ours-512", "ours-512-ck"} <= set(medians):
        print(f"  4 x 512, checkpointed / not: peak RSS {peaks['ours-512-ck']:.0f} / {peaks['ours-512']:.0f} MB = "
              f"{peaks['ours-512-ck'] / peaks['ours-512']:.2f}x, time {medians['ours-512-ck'] / medians['ours-512']:.2f}x")


if __name__ == "__main__":
    main()
