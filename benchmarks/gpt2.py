"""GPT-2 small (124M) training at batch 1 × 128 tokens, ours against PyTorch, each alone in its own process.

Run from the repository root, with nothing else busy:

    python -m benchmarks.gpt2 [--rounds 2] [--steps 5] [--threads 2]

Each process builds GPT-2 small with random weights (float32) and times, on a
fixed batch of 128 token ids, (a) forward + backward (with zero_grad), then (b) the
full training step: forward, backward, clip_grad_norm_(1.0) and AdamW over all 124M
parameters. The PyTorch peer is benchmarks/torch_reference.py. Figures are the
medians over the rounds of each process's median; peak RSS is the whole
process's, AdamW's moments included. `--device cuda --batch 8 --seq 1024`
times the GPU workload of benchmarks/gpu.py; `--shape shakespeare-char`
swaps GPT-2 small for nanoGPT's Shakespeare-char GPU model (6 layers, 6 heads,
384 wide, block 256, vocabulary 65, dropout 0.2; benchmarks.gpu runs it at
batch 64 × 256). Prints; asserts nothing.
"""
from benchmarks import alone
from benchmarks.train_step import median_seconds, ours_runs, torch_runs

PEERS = ["ours", "torch"]
GPT2_SMALL = dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
SHAKESPEARE_CHAR = dict(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384, dropout=0.2)
SHAPES = {"gpt2-small": GPT2_SMALL, "shakespeare-char": SHAKESPEARE_CHAR}


def main(argv=None):
    parser = alone.parser("python -m benchmarks.gpt2", __doc__.splitlines()[0], PEERS, rounds=2)
    parser.add_argument("--steps", type=alone.COUNT, default=5, help="timed runs of each workload per process")
    parser.add_argument("--batch", type=alone.COUNT, default=1, help="sequences per step")
    parser.add_argument("--seq", type=alone.COUNT, default=128,
                        help="tokens per sequence, at most the model's block size")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where every peer trains")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="gpt2-small", help="the model")
    args = alone.parse_args(parser, argv)
    shape = SHAPES[args.shape]
    if args.seq > shape["block_size"]:
        parser.error(f"--seq {args.seq} exceeds {args.shape}'s block size {shape['block_size']}")
    if args.peer:
        runs = (ours_runs if args.peer == "ours" else torch_runs)(shape, args.batch, args.seq, args.device)
        loss, fwd_bwd = median_seconds(runs["fwd_bwd"], args.steps, warmup=2)
        _, step = median_seconds(runs["step"], args.steps, warmup=2)
        alone.emit(args.peer, {"fwd_bwd_s": fwd_bwd, "step_s": step, "first_loss": loss})
        return
    print(f"{args.shape} ({', '.join(f'{k} {v}' for k, v in shape.items())}), batch {args.batch} x {args.seq} "
          f"tokens, float32 on {args.device}; "
          f"{args.threads} thread(s) per peer, {args.steps} timed runs of each workload per process")
    results = alone.run("benchmarks.gpt2", args, argv)
    alone.report(results, "fwd_bwd_s", "(a) forward + backward", "ms", scale=1e3, memory=False)
    alone.report(results, "step_s", "(b) full training step with clipping and AdamW", "ms", scale=1e3)
    alone.report_memory(results)


if __name__ == "__main__":
    main()
