"""python -m models.eval CHECKPOINT --data DIR: a model's loss and perplexity over a whole prepared split, in order.
Unlike the estimate that training prints (random batches), this reads the validation split (or --split train) from
its first token to its last. Windows of the checkpoint's own block size T move on by --stride tokens (T/2 unless
given); each window scores only the targets that no window before it scored, so every token after the first (which
has nothing before it to be predicted from) is scored exactly once, and each, but those of the first window, with
at least T − stride tokens of context. The loss is the mean cross-entropy per token in nats; the perplexity is its
exponential. The model's tokenizer must be the one that made the shards, and the shards read must match their
checksums; either mistake is one line.

    python -m models.eval out --data data/books [--max-tokens N] [--stride S] [--device cuda]
"""
import math
import sys
import time

import numpy as np

import autograd as ag
from models.training import checkpoint
from models.cli import Parser, counted, device, interval, shows_progress
from models.training.shards import PreparedData, ShardError, check_tokenizer, prepared_data


def make_parser():
    p = Parser("python -m models.eval", __doc__.split("\n\n")[0])  # the windows and which tokens they score
    p.add_argument("checkpoint", type=checkpoint.model_folder, metavar="CHECKPOINT",
                   help="a models.train checkpoint folder, or a Hugging Face GPT-2 folder")
    p.add_argument("--data", type=prepared_data, required=True, metavar="DIR", help="a folder models.prepare made")
    p.add_argument("--split", choices=["val", "train"], default="val",
                   help="which split of --data to score")
    p.add_argument("--max-tokens", type=interval(int, "[2, inf)"), default=None,
                   help="read only the split's first N tokens")
    p.add_argument("--stride", type=interval(int, "[1, inf)"), default=None,
                   help="tokens each window moves on, at most the block size (default: half of it)")
    p.add_argument("--batch-size", type=interval(int, "[1, inf)"), default=8, help="windows per forward pass")
    p.add_argument("--device", type=device, default="cpu", metavar="{cpu,cuda}",
                   help="where the model runs (cuda: the GPU, through CuPy)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (there is none where stderr is not a terminal)")
    return p


def parse_args(argv=None):
    """The options, with those the checkpoint's block size bounds checked against its config.json before a weight
    is read; `block_size` is added (that block size) and --stride's default filled in."""
    p = make_parser()
    args = p.parse_args(argv)
    try:
        args.block_size = block = checkpoint.config_of(args.checkpoint).block_size
    except (ValueError, OSError) as exc:
        p.error(str(exc))
    if args.stride is not None and args.stride > block:
        p.error(f"--stride {args.stride} exceeds the block size {block} of the model in {args.checkpoint}, so "
                f"tokens between windows would go unscored; give --stride {block} or less")
    if args.max_tokens is not None and args.max_tokens <= block:
        p.error(f"--max-tokens {args.max_tokens:,} is too few for one window of the model in {args.checkpoint} "
                f"(its block size, {block} tokens, and their targets); give --max-tokens {block + 1:,} or more")
    args.stride = args.stride or max(block // 2, 1)
    return args


def windows(n, block, stride):
    """(begin, skip) for every window over `n` tokens: its inputs are tokens [begin, begin + block), its targets
    the next token of each, and the first `skip` targets were scored by an earlier window."""
    scored_to, begin = 0, 0  # targets at positions up to scored_to are done; position 0 is never a target
    while scored_to < n - 1:
        begin = min(begin, n - 1 - block)
        yield begin, scored_to - begin
        scored_to = begin + block
        begin += stride


def evaluate(model, tokens, n, block, stride, batch_size, device, progress):
    """(summed loss, targets scored) over the first `n` of `tokens`, window after window."""
    total, scored = 0.0, 0
    spans = list(windows(n, block, stride))
    for first in range(0, len(spans), batch_size):
        batch = spans[first:first + batch_size]
        low = batch[0][0]
        span = tokens[low:batch[-1][0] + block + 1]  # one read for the batch: its windows overlap
        rows = np.stack([span[begin - low:begin - low + block + 1] for begin, _ in batch])
        x, y = rows[:, :-1], rows[:, 1:].copy()
        for row, (_, skip) in enumerate(batch):
            y[row, :skip] = -1  # scored before: cross_entropy ignores -1
        count = int((y >= 0).sum())
        _, loss = model(ag.Tensor(np.ascontiguousarray(x), device=device), ag.Tensor(y, device=device))
        total += loss.item() * count
        scored += count
        progress(count, total / scored)
    return total, scored


def main(argv=None):
    args = parse_args(argv)
    block, stride = args.block_size, args.stride
    try:
        data = PreparedData(args.data)
        tokens = data.splits[args.split]
        n = min(len(tokens), args.max_tokens or len(tokens))
        if n <= block:  # the split's own length: parse_args refused a --max-tokens this low
            if n == 0 and args.split == "val" and data.meta.get("split", {}).get("val_fraction") == 0:
                raise ValueError(f"the val split of {args.data} is empty: it was prepared with --val-fraction 0; "
                                 "give --split train, or prepare the text again with a --val-fraction above 0")
            raise ValueError(f"the {args.split} split of {args.data} has {counted(n, 'token')}, too few for one "
                             f"window of the model's block size {block} and its targets "
                             f"({counted(block + 1, 'token')}); prepare more text")
        check_tokenizer(data, checkpoint.load_tokenizer(args.checkpoint), args.checkpoint)
        for k in np.flatnonzero(tokens.starts[:-1] < n):  # the shards this reads, checked before the weights load
            tokens.verify(k)
        model = checkpoint.load_weights(args.checkpoint)
        model.to(args.device)
        model.eval()
        from tqdm import tqdm
        bar = tqdm(total=n - 1, unit="tok", unit_scale=True, disable=not shows_progress(args.no_progress),
                   dynamic_ncols=True,
                   file=sys.stderr)

        def progress(count, mean):
            bar.set_postfix_str(f"loss {mean:.4f}", refresh=False)
            bar.update(count)

        start = time.perf_counter()
        with ag.no_grad():
            total, scored = evaluate(model, tokens, n, block, stride, args.batch_size, args.device, progress)
        bar.close()
    except (ValueError, OSError, ShardError) as exc:
        print(f"eval: error: {exc}", file=sys.stderr)
        return 1
    except MemoryError as exc:  # a forward's logits are --batch-size × block × vocabulary floats
        print(f"eval: error: out of memory ({exc or 'MemoryError'}); ask for a smaller --batch-size",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\neval: interrupted", file=sys.stderr)
        return 130
    mean = total / scored
    part = f"its first {n:,} of {len(tokens):,} tokens" if n < len(tokens) else f"all {n:,} tokens"
    print(f"eval: {args.checkpoint} on the {args.split} split of {args.data} ({part}, {scored:,} scored): "
          f"loss {mean:.4f}, perplexity {math.exp(mean):.2f} (block {block}, stride {stride}, "
          f"{time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
