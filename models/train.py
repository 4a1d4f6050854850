"""python -m models.train: train a GPT on Shakespeare (or your text), the project's main job.

Defaults are nanoGPT's CPU run of shakespeare_char (characters, 4 layers,
4 heads, 128 wide, blocks of 64, batches of 12, 2000 iterations of AdamW with
warmup + cosine decay and gradient clipping; train and val loss every 250),
except a peak learning rate of 2e-3 instead of 1e-3: measured here, it ends
at val loss 1.80 instead of 1.91 in the same 2000 iterations.
It writes a checkpoint folder (weights and config in Hugging Face's GPT-2
format, tokenizer, optimizer and random-generator state), from which
`--resume` continues exactly, a loss-curve PNG, and prints a sample.
`mpiexec -n N python -m models.train` trains data-parallel on N processes
(see models/parallel.py): the same checkpoints, any N.
"""
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

import autograd as ag
import nn
from autograd import backend
from models import parallel
from models.cli import Parser
from models.data import TokenData, load_text
from models.gpt2 import GPT, GPTConfig
from models.io import atomic_path, write_json
from models.tokenizer import CharTokenizer, GPT2Tokenizer, tokenizer_from_dict
from nn import distributed as dist

STATE_FILE = "train_state.json"
OPTIMIZER_FILE = "optimizer.npz"
TOKENIZER_FILE = "tokenizer.json"


def parse_args(argv=None):
    p = Parser("python -m models.train", __doc__.splitlines()[0])
    g = p.add_argument_group("data")
    g.add_argument("--data", default=None, help="a UTF-8 text file (default: the shipped Tiny Shakespeare)")
    g.add_argument("--tokenizer", choices=["char", "gpt2"], default="char",
                   help="characters, or GPT-2's byte-level BPE (forced by --init-from)")
    g = p.add_argument_group("model")
    g.add_argument("--n-layer", type=int, default=4)
    g.add_argument("--n-head", type=int, default=4)
    g.add_argument("--n-embd", type=int, default=128)
    g.add_argument("--block-size", type=int, default=64)
    g.add_argument("--dropout", type=float, default=0.0)
    g.add_argument("--no-bias", action="store_true", help="no biases in Linear and LayerNorm")
    g.add_argument("--init-from", default=None, metavar="DIR",
                   help="fine-tune a Hugging Face GPT-2 folder (config.json + model.safetensors)")
    g = p.add_argument_group("optimisation")
    g.add_argument("--batch-size", type=int, default=12, help="rows per micro-batch on each process")
    g.add_argument("--grad-accum", type=int, default=1,
                   help="micro-batches per optimizer step; the step sees batch x grad-accum x processes rows")
    g.add_argument("--max-iters", type=int, default=2000)
    g.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    g.add_argument("--min-lr", type=float, default=1e-4)
    g.add_argument("--warmup-iters", type=int, default=100)
    g.add_argument("--lr-decay-iters", type=int, default=None, help="end of the cosine (default: --max-iters)")
    g.add_argument("--weight-decay", type=float, default=0.1)
    g.add_argument("--beta1", type=float, default=0.9)
    g.add_argument("--beta2", type=float, default=0.99)
    g.add_argument("--grad-clip", type=float, default=1.0, help="0 disables clipping")
    g = p.add_argument_group("run")
    g.add_argument("--eval-interval", type=int, default=250)
    g.add_argument("--eval-iters", type=int, default=50, help="batches per loss estimate")
    g.add_argument("--out-dir", default="out")
    g.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out-dir")
    g.add_argument("--seed", type=int, default=1337)
    g.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    g.add_argument("--peak-tflops", type=float, default=None,
                   help="the hardware peak for model-FLOPs utilisation (default: measured with a matmul)")
    g.add_argument("--sample-tokens", type=int, default=300, help="length of the sample printed at the end")
    g.add_argument("--no-progress", action="store_true", help="no progress bar (logs still print)")
    args = p.parse_args(argv)
    for name in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "grad_accum", "eval_interval",
                 "eval_iters"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.max_iters < 0 or args.warmup_iters < 0:
        p.error("--max-iters and --warmup-iters cannot be negative")
    if not 0 <= args.dropout < 1:
        p.error(f"--dropout must lie in [0, 1), got {args.dropout}")
    if args.lr <= 0 or args.min_lr < 0:
        p.error(f"--lr must be positive and --min-lr not negative, got {args.lr} and {args.min_lr}")
    return args


def measure_peak_flops(device):
    """FLOP/s of a large float32 matmul on this device: the yardstick for model-FLOPs utilisation."""
    xp = backend.xp_for(device)
    a = xp.ones((1024, 1024), dtype=xp.float32)
    a @ a  # warm up the BLAS threads
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        float((a @ a)[0, 0])  # reading a value waits for an asynchronous GPU
        best = min(best, time.perf_counter() - start)
    return 2 * 1024 ** 3 / best


def build(args, out_dir):
    """Model, tokenizer and token data, fresh, fine-tuned from --init-from, or resumed from --out-dir."""
    text = load_text(args.data)
    if args.resume:
        model = GPT.from_pretrained(out_dir, dropout=args.dropout)
        tokenizer = tokenizer_from_dict(json.loads((out_dir / TOKENIZER_FILE).read_text(encoding="utf-8")))
    elif args.init_from:
        model = GPT.from_pretrained(args.init_from, dropout=args.dropout)
        tokenizer = GPT2Tokenizer()
        if args.block_size < model.config.block_size:
            model.crop_block_size(args.block_size)
    else:
        tokenizer = GPT2Tokenizer() if args.tokenizer == "gpt2" else CharTokenizer(text)
        config = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=args.block_size, n_layer=args.n_layer,
                           n_head=args.n_head, n_embd=args.n_embd, dropout=args.dropout, bias=not args.no_bias)
        ag.manual_seed(args.seed)
        model = GPT(config)
    if args.block_size > model.config.block_size:
        raise ValueError(f"--block-size {args.block_size} exceeds the model's block_size {model.config.block_size}")
    data = TokenData(tokenizer.encode(text))
    return model.to(args.device), tokenizer, data


def estimate_loss(model, data, args, it):
    """Mean loss over `eval_iters` batches per split, from a generator of its own (training's stays untouched).

    A batch has an iteration's rows, each rank evaluating its micro-batches as in training; the mean is over all.
    """
    rows_per_iter = parallel.rows(parallel.batch_layout(args))

    def local_means():
        means = []
        with ag.no_grad():
            for split in ("train", "val"):
                rng = np.random.default_rng([args.seed, it, split == "val"])
                total = 0.0
                for _ in range(args.eval_iters):
                    x, y = data.batch(split, rows_per_iter, args.block_size, rng)
                    for xb, yb in parallel.micro_batches(x, y, args.batch_size, args.grad_accum):
                        _, loss = model(ag.Tensor(xb, device=args.device), ag.Tensor(yb, device=args.device))
                        total += loss.item()
                means.append(total / (args.eval_iters * args.grad_accum))
        return means

    model.eval()
    train_loss, val_loss = parallel.mean_over_ranks(parallel.agree(local_means))
    model.train()
    return {"train": train_loss, "val": val_loss}


def accumulate_gradients(model, x, y, args, it, lr):
    """Forward and backward over this rank's micro-batches of (x, y); their mean loss.

    Each micro-batch's loss is scaled by 1/grad_accum, so the gradients the
    backward passes add up are those of the mean loss.
    """
    total = 0.0
    for xb, yb in parallel.micro_batches(x, y, args.batch_size, args.grad_accum):
        _, loss = model(ag.Tensor(xb, device=args.device), ag.Tensor(yb, device=args.device))
        (loss / args.grad_accum).backward()
        total += loss.item()
    loss_value = total / args.grad_accum
    if not math.isfinite(loss_value):
        raise ValueError(f"the loss became {loss_value} at iteration {it} (lr {lr:.2e}); "
                         "try a smaller --lr or a --grad-clip")
    return loss_value


def save_checkpoint(out_dir, model, tokenizer, optimizer, state):
    """Every file is replaced atomically; the state file goes last, so it never points past the weights."""
    model.save_pretrained(out_dir)
    write_json(out_dir / TOKENIZER_FILE, tokenizer.to_dict())
    opt_state = optimizer.state_dict()
    arrays = {f"{i}.{k}": v for i, s in opt_state["state"].items() for k, v in s.items() if k != "step"}
    meta = {"steps": opt_state["steps"], "param_groups": opt_state["param_groups"],
            "param_steps": {str(i): s["step"] for i, s in opt_state["state"].items()}}
    with atomic_path(out_dir / OPTIMIZER_FILE) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
    write_json(out_dir / STATE_FILE, {**state, "optimizer": meta})


def load_optimizer_state(out_dir, optimizer, meta):
    with np.load(out_dir / OPTIMIZER_FILE) as f:
        state = {}
        for key in f.files:
            index, name = key.split(".", 1)
            state.setdefault(int(index), {})[name] = f[key]
    for index, steps in meta["param_steps"].items():
        state[int(index)]["step"] = steps
    optimizer.load_state_dict({"steps": meta["steps"], "param_groups": meta["param_groups"], "state": state})


def plot_losses(path, history, evals):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    steps = np.arange(len(history))
    ax.plot(steps, history, color="#9ecae1", linewidth=0.8, label="train loss (each batch)")
    if len(history) >= 50:
        smooth = np.convolve(history, np.ones(50) / 50, mode="valid")
        ax.plot(steps[49:], smooth, color="#3182bd", linewidth=1.5, label="train loss (50-iter mean)")
    if evals:
        its = [e["iter"] for e in evals]
        ax.plot(its, [e["train"] for e in evals], "o-", color="#31a354", label="train loss (eval)")
        ax.plot(its, [e["val"] for e in evals], "s-", color="#e6550d", label="val loss (eval)")
        ax.annotate(f"val {evals[-1]['val']:.3f}", (its[-1], evals[-1]["val"]), textcoords="offset points",
                    xytext=(-10, 10), ha="right", color="#e6550d")
    ax.set_xlabel("iteration")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.set_title("Training loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


def sample_prompt(tokenizer, data):
    """Start a sample where a document starts: <|endoftext|> for GPT-2, else a newline (or the text's first token)."""
    if isinstance(tokenizer, GPT2Tokenizer):
        return [tokenizer.eot_token]
    try:
        return tokenizer.encode("\n")
    except ValueError:
        return data.splits["train"][:1].tolist()


def prepare(args, out_dir):
    """Model, tokenizer, data, optimizer, data generator and run state: fresh, or as the checkpoint left them."""
    if args.resume and not (out_dir / STATE_FILE).is_file():
        raise FileNotFoundError(f"--resume: no checkpoint in {out_dir} (expected {out_dir / STATE_FILE})")
    model, tokenizer, data = build(args, out_dir)
    parallel.seed_followers(args.seed)
    optimizer = nn.optim.AdamW(model.optimizer_groups(args.weight_decay), lr=args.lr,
                               betas=(args.beta1, args.beta2))
    data_rng = np.random.default_rng(args.seed)
    state = {"iter": 0, "history": [], "evals": []}
    if args.resume:
        state = json.loads((out_dir / STATE_FILE).read_text(encoding="utf-8"))
        load_optimizer_state(out_dir, optimizer, state.pop("optimizer"))
        data_rng.bit_generator.state = state["data_rng"]
        parallel.restore_rng(state, args.seed)
        change = parallel.layout_change(state.get("batch"), args)
        if change:
            print(change)
    return model, tokenizer, data, optimizer, data_rng, state


def train(args):
    out_dir = Path(args.out_dir)
    dist.init(args.device)
    model, tokenizer, data, optimizer, data_rng, state = parallel.agree(lambda: prepare(args, out_dir))
    dist.broadcast_parameters(model)  # every rank starts from rank 0's weights
    cfg = model.config
    decay_iters = args.lr_decay_iters or args.max_iters
    n_params = model.num_parameters()
    layout = parallel.batch_layout(args)
    rows_per_iter = parallel.rows(layout)
    tokens_per_iter = rows_per_iter * args.block_size
    flops_per_iter = (6 * n_params + 12 * cfg.n_layer * cfg.n_embd * args.block_size) * tokens_per_iter
    peak = args.peak_tflops * 1e12 if args.peak_tflops else measure_peak_flops(args.device)
    peak = dist.all_reduce([peak])[0]  # the job's: the sum of every process's
    rows_note = f" ({parallel.describe(layout)})" if rows_per_iter != args.batch_size else ""
    print(f"model: {cfg.n_layer} layers, {cfg.n_head} heads, {cfg.n_embd} wide, block {args.block_size}, "
          f"vocab {cfg.vocab_size}: {n_params:,} parameters on {args.device}")
    print(f"data: {len(data.splits['train']):,} train / {len(data.splits['val']):,} val tokens; "
          f"{tokens_per_iter} tokens per iteration{rows_note}; peak {peak / 1e9:.1f} GFLOP/s for MFU")

    from tqdm import tqdm
    bar = tqdm(total=args.max_iters, initial=state["iter"], disable=args.no_progress or dist.rank > 0, unit="it",
               dynamic_ncols=True, file=sys.stderr)
    log = bar.write if not args.no_progress else print
    start_iter = state["iter"]
    step_seconds = comm_seconds = 0.0
    for it in range(start_iter, args.max_iters + 1):
        lr = nn.optim.warmup_cosine(it, args.lr, args.warmup_iters, decay_iters, args.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if (it % args.eval_interval == 0 or it == args.max_iters) and not (args.resume and it == start_iter):
            losses = estimate_loss(model, data, args, it)
            state["evals"].append({"iter": it, **losses})
            log(f"iter {it:5d}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            if it > 0:
                state.update(iter=it, data_rng=data_rng.bit_generator.state, batch=layout, **parallel.rng_states())
                parallel.on_root(lambda: save_checkpoint(out_dir, model, tokenizer, optimizer, state))
        if it == args.max_iters:
            break
        t0, comm0 = time.perf_counter(), dist.comm_seconds
        x, y = data.batch("train", rows_per_iter, args.block_size, data_rng)  # the iteration's rows, alike on all ranks
        optimizer.zero_grad()
        local_loss = parallel.agree(lambda: accumulate_gradients(model, x, y, args, it, lr))
        loss_value = parallel.mean_over_ranks([local_loss])[0]
        dist.all_reduce_gradients(model)
        if args.grad_clip:
            nn.optim.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        state["history"].append(loss_value)
        dt = time.perf_counter() - t0
        step_seconds += dt
        comm_seconds += dist.comm_seconds - comm0
        bar.set_postfix_str(f"loss {loss_value:.4f}, {tokens_per_iter / dt:,.0f} tok/s, {dt * 1e3:.0f} ms/it, "
                            f"mfu {flops_per_iter / dt / peak:.1%}", refresh=False)
        bar.update(1)
    bar.close()
    if dist.rank > 0:
        return  # rank 0 alone plots, reports and samples

    plot_losses(out_dir / "loss.png", state["history"], state["evals"])
    print(f"wrote the checkpoint to {out_dir}/ and the loss curve to {out_dir / 'loss.png'}")
    steps = args.max_iters - start_iter
    if steps > 0:
        comm_note = f", {comm_seconds / steps * 1e3:.1f} ms of it communicating" if dist.world_size > 1 else ""
        print(f"speed: {steps * tokens_per_iter / step_seconds:,.0f} tokens/s over {steps} iterations "
              f"({step_seconds / steps * 1e3:.1f} ms each{comm_note}; evaluations not counted)")
    if state["evals"]:
        final = state["evals"][-1]
        print(f"final (iter {final['iter']}): train loss {final['train']:.4f}, val loss {final['val']:.4f}")
    if args.sample_tokens:
        model.eval()
        prompt = sample_prompt(tokenizer, data)
        out = model.generate(ag.Tensor([prompt], device=args.device), args.sample_tokens, temperature=0.8, top_k=200)
        print("sample:\n" + tokenizer.decode(out.numpy()[0].tolist()))


def main(argv=None):
    with parallel.followers_quiet(stderr=True):  # --help and option errors once, from rank 0
        args = parse_args(argv)
    try:
        with parallel.followers_quiet():  # rank 0 speaks for all; a rank that fails says why
            train(args)
    except parallel.PeerFailed:
        return 1  # the rank that failed has said why
    except (ValueError, FileNotFoundError, KeyError, dist.DistributedError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        prefix = parallel.error_prefix(exc)
        if prefix is not None:
            print(f"train: error: {prefix}{message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if dist.rank == 0:
            print("\ntrain: interrupted; the last checkpoint is intact", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
