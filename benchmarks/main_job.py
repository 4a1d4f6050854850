"""The main job end to end, `python -m models.train` with its defaults, against the same loop in PyTorch.

Run from the repository root, with nothing else busy (about 2 × 3 minutes):

    python -m benchmarks.main_job [--max-iters 2000] [--rounds 1]

Ours runs models.train's main as a user would (2000 iterations, train and val
loss every 250, a checkpoint at each, the loss plot, a 300-token sample), in a
fresh process. The PyTorch peer runs the same job on benchmarks/torch_reference.py:
the same characters and batches (models.training.data, models.tokenizer), model shape,
AdamW groups, warmup + cosine schedule, clipping, evaluations with a checkpoint
(torch.save) each, and a 300-token sample with its KV cache. Timed: the whole
process, interpreter start and imports included. Memory: the peak resident
size of that whole process. Prints ours against PyTorch's time and the target (≤ 1.0×); asserts nothing.
"""
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import alone

PEERS = ["ours", "torch"]
# models.train's defaults
SEED, BATCH, BLOCK, LAYERS, HEADS, WIDTH = 1337, 12, 64, 4, 4, 128
LR, MIN_LR, WARMUP, WEIGHT_DECAY, BETAS, CLIP = 2e-3, 1e-4, 100, 0.1, (0.9, 0.99), 1.0
EVAL_INTERVAL, EVAL_ITERS, SAMPLE_TOKENS = 250, 50, 300
TARGET = 1.0  # ours against PyTorch's whole process


def ours(max_iters, out_dir):
    from models.training.train import main as train
    code = train(["--max-iters", str(max_iters), "--out-dir", str(out_dir), "--no-progress"])
    if code:
        raise SystemExit(f"models.train exited with {code}")
    return json.loads((out_dir / "train_state.json").read_text())["evals"][-1]["val"]


def lr_at(it, max_iters):
    """nn.optim.warmup_cosine, restated: importing nn would load our engine into the PyTorch peer's process."""
    if it < WARMUP:
        return LR * (it + 1) / WARMUP
    if it >= max_iters:
        return MIN_LR
    progress = (it - WARMUP) / max(1, max_iters - WARMUP)
    return MIN_LR + 0.5 * (1 + math.cos(math.pi * progress)) * (LR - MIN_LR)


def torch_job(max_iters, out_dir):
    import torch
    from benchmarks.torch_reference import GPT
    from models.training.data import TokenData, load_text
    from models.gpt.tokenizer import CharTokenizer

    torch.set_num_threads(alone.threads())
    text = load_text()
    tokenizer = CharTokenizer(text)
    data = TokenData(tokenizer.encode(text))
    torch.manual_seed(SEED)
    model = GPT(vocab_size=tokenizer.vocab_size, block_size=BLOCK, n_layer=LAYERS, n_head=HEADS, n_embd=WIDTH)
    optimizer = model.optimizer(lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)
    data_rng = np.random.default_rng(SEED)

    @torch.no_grad()
    def evaluate(it):
        model.eval()
        losses = {}
        for split in ("train", "val"):
            rng = np.random.default_rng([SEED, it, split == "val"])
            losses[split] = sum(model(*(torch.from_numpy(a) for a in data.batch(split, BATCH, BLOCK, rng)))[1].item()
                                for _ in range(EVAL_ITERS)) / EVAL_ITERS
        model.train()
        return losses

    for it in range(max_iters + 1):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(it, max_iters)
        if it % EVAL_INTERVAL == 0 or it == max_iters:
            losses = evaluate(it)
            print(f"iter {it:5d}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", flush=True)
            if it > 0:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter": it},
                           out_dir / "ckpt.pt")
        if it == max_iters:
            break
        x, y = (torch.from_numpy(a) for a in data.batch("train", BATCH, BLOCK, data_rng))
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        loss.item()
    model.eval()
    prompt = torch.tensor([tokenizer.encode("\n")])
    sample = model.generate(prompt, SAMPLE_TOKENS, temperature=0.8, top_k=200)
    print("sample:\n" + tokenizer.decode(sample[0].tolist()))
    return losses["val"]


def main(argv=None):
    parser = alone.parser("python -m benchmarks.main_job", __doc__.splitlines()[0], PEERS, rounds=1)
    parser.add_argument("--max-iters", type=int, default=2000, help="training iterations (the main job's 2000)")
    args = parser.parse_args(argv)
    if args.peer:
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            val = (ours if args.peer == "ours" else torch_job)(args.max_iters, Path(tmp))
        alone.emit(args.peer, {"job_s": time.perf_counter() - start, "val_loss": val})
        return
    print(f"the main job end to end: {args.max_iters} iterations of the default GPT on Tiny Shakespeare, evaluations "
          f"every {EVAL_INTERVAL}, a {SAMPLE_TOKENS}-token sample; {args.threads} thread(s) per peer")
    results = alone.run("benchmarks.main_job", args, argv)
    medians = alone.report(results, "process_s", "the whole process, start to exit", "s")
    if {"ours", "torch"} <= set(medians):
        ratio = medians["ours"] / medians["torch"]
        print(f"  the target, ours / torch = {ratio:.3f} {alone.verdict(ratio, TARGET)}")  # 1.004: not 1.00, NOT met
    alone.report_memory(results)
    print("  final val loss: " + ", ".join(f"{peer} {alone.median(results, peer, 'val_loss'):.4f}"
                                         for peer in results))


if __name__ == "__main__":
    main()
