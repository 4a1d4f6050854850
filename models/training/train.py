"""python -m models.train: train a GPT on Shakespeare (or your text), the project's main job.

Defaults are nanoGPT's CPU run of shakespeare_char (characters, 4 layers,
4 heads, 128 wide, blocks of 64, batches of 12, 2000 iterations of AdamW with
warmup + cosine decay and gradient clipping; train and val loss every 250),
except a peak learning rate of 2e-3 instead of 1e-3: measured here, it ends
at val loss 1.80 instead of 1.91 in the same 2000 iterations.
It writes a checkpoint folder (weights and config in Hugging Face's GPT-2
format, tokenizer, optimizer and random-generator state; see models/training/checkpoint.py)
whenever the val loss improves (or at every evaluation with --always-save), from
which `--resume` continues exactly, a loss-curve PNG, and prints a sample.
Options are checked as they are parsed; a folder that holds a checkpoint is
only continued (--resume) or replaced (--overwrite), never overwritten unasked.
`mpiexec -n N python -m models.train` trains data-parallel on N processes
(see models/training/parallel.py): the same checkpoints, any N.
"""
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import autograd as ag
import nn
from models import checkpoint, parallel
from models.cli import Parser, device, input_file, input_folder, interval, output_folder
from models.data import TokenData, load_text
from models.gpt2 import GPT, GPTConfig
from models.io import atomic_path
from models.tokenizer import CharTokenizer, GPT2Tokenizer
from nn import distributed as dist

# What a checkpoint fixes for good (its model) and what it does not store (how this run is carried out);
# every other option is stored with the checkpoint and, on --resume, used again unless the command line changes it.
MODEL_OPTIONS = ("tokenizer", "n_layer", "n_head", "n_embd", "no_bias", "init_from")
RUN_OPTIONS = ("out_dir", "resume", "overwrite", "device", "peak_tflops", "sample_tokens", "no_progress")

POSITIVE, COUNT = interval(int, "[1, inf)"), interval(int, "[0, inf)")


def make_parser():
    p = Parser("python -m models.train", __doc__.splitlines()[0])
    g = p.add_argument_group("data")
    g.add_argument("--data", type=input_file, default=None,
                   help="a UTF-8 text file (default: the shipped Tiny Shakespeare)")
    g.add_argument("--tokenizer", choices=["char", "gpt2"], default="char",
                   help="characters, or GPT-2's byte-level BPE (--init-from brings its own)")
    g = p.add_argument_group("model")
    g.add_argument("--n-layer", type=POSITIVE, default=4)
    g.add_argument("--n-head", type=POSITIVE, default=4)
    g.add_argument("--n-embd", type=POSITIVE, default=128)
    g.add_argument("--block-size", type=POSITIVE, default=64)
    g.add_argument("--dropout", type=interval(float, "[0, 1)"), default=0.0)
    g.add_argument("--no-bias", action="store_true", help="no biases in Linear and LayerNorm")
    g.add_argument("--init-from", type=input_folder, default=None, metavar="DIR",
                   help="fine-tune a Hugging Face GPT-2 folder (config.json + model.safetensors) or a checkpoint")
    g = p.add_argument_group("optimisation")
    g.add_argument("--batch-size", type=POSITIVE, default=12, help="rows per micro-batch on each process")
    g.add_argument("--grad-accum", type=POSITIVE, default=1,
                   help="micro-batches per optimizer step; the step sees batch x grad-accum x processes rows")
    g.add_argument("--max-iters", type=COUNT, default=2000)
    g.add_argument("--lr", type=interval(float, "(0, inf)"), default=2e-3, help="peak learning rate")
    g.add_argument("--min-lr", type=interval(float, "[0, inf)"), default=1e-4)
    g.add_argument("--warmup-iters", type=COUNT, default=100)
    g.add_argument("--lr-decay-iters", type=POSITIVE, default=None, help="end of the cosine (default: --max-iters)")
    g.add_argument("--weight-decay", type=interval(float, "[0, inf)"), default=0.1)
    g.add_argument("--beta1", type=interval(float, "[0, 1)"), default=0.9)
    g.add_argument("--beta2", type=interval(float, "[0, 1)"), default=0.99)
    g.add_argument("--grad-clip", type=interval(float, "[0, inf)"), default=1.0, help="0 disables clipping")
    g = p.add_argument_group("run")
    g.add_argument("--eval-interval", type=POSITIVE, default=250)
    g.add_argument("--eval-iters", type=POSITIVE, default=50, help="batches per loss estimate")
    g.add_argument("--always-save", action="store_true",
                   help="save at every evaluation, not only when the val loss improves on the checkpoint's")
    g.add_argument("--out-dir", type=output_folder, default="out")
    g.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out-dir")
    g.add_argument("--overwrite", action="store_true", help="replace the checkpoint in --out-dir with a new run")
    g.add_argument("--seed", type=interval(int, "[0, 4294967295]"), default=1337)
    g.add_argument("--device", type=device, default="cpu", metavar="{cpu,cuda}")
    g.add_argument("--peak-tflops", type=interval(float, "(0, inf)"), default=None,
                   help="the hardware peak for model-FLOPs utilisation (default: measured with a matmul)")
    g.add_argument("--sample-tokens", type=COUNT, default=300, help="length of the sample printed at the end")
    g.add_argument("--no-progress", action="store_true", help="no progress bar (logs still print)")
    return p


def parse_args(argv=None):
    p = make_parser()
    args = p.parse_args(argv)
    args.given = p.given(argv, args)
    try:
        if args.resume and args.overwrite:
            raise ValueError("--resume continues the checkpoint and --overwrite replaces it: choose one")
        checkpoint.check_out_dir(Path(args.out_dir), args.resume, args.overwrite)
        if not args.resume:
            check_combinations(args)
    except ValueError as exc:
        p.error(str(exc))
    return args


def check_combinations(args):
    """Options that are each in range but make no sense together (on --resume, after the checkpoint's are in)."""
    if args.min_lr > args.lr:
        raise ValueError(f"--min-lr {args.min_lr} exceeds the peak --lr {args.lr}")
    if not args.init_from and not args.resume and args.n_embd % args.n_head:
        raise ValueError(f"--n-embd {args.n_embd} is not a multiple of --n-head {args.n_head}: "
                         "every head gets n_embd / n_head features")


def measure_peak_flops(device):
    """FLOP/s of a large float32 matmul on this device: the yardstick for model-FLOPs utilisation."""
    a = ag.ones(1024, 1024, dtype="float32", device=device)
    a @ a  # warm up the BLAS threads
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        (a @ a)[0, 0].item()  # reading a value waits for an asynchronous GPU
        best = min(best, time.perf_counter() - start)
    return 2 * 1024 ** 3 / best


def build(args, out_dir):
    """Model, tokenizer and token data, fresh, fine-tuned from --init-from, or resumed from --out-dir."""
    text = load_text(args.data)
    if args.resume:
        model, tokenizer = checkpoint.load_model(out_dir, dropout=args.dropout)
    elif args.init_from:
        ignored = [f"--{name.replace('_', '-')}" for name in MODEL_OPTIONS
                   if name in args.given and name != "init_from"]
        if ignored:
            print(f"init-from: the model and its tokenizer come from {args.init_from}, so {', '.join(ignored)} "
                  "does not apply")
        model, tokenizer = checkpoint.load_model(args.init_from, dropout=args.dropout)
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
    try:
        data = TokenData(tokenizer.encode(text))
    except ValueError as exc:  # a character the checkpoint's tokenizer never saw
        source = out_dir if args.resume else args.init_from
        raise ValueError(f"the data does not fit the tokenizer of {source}: {exc}") from None
    data.check_fits(args.block_size)
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
                    for loss in micro_batch_losses(model, x, y, args):
                        total += loss.item()
                means.append(total / (args.eval_iters * args.grad_accum))
        return means

    model.eval()
    train_loss, val_loss = parallel.mean_over_ranks(parallel.agree(local_means))
    model.train()
    return {"train": train_loss, "val": val_loss}


def micro_batch_losses(model, x, y, args):
    """The loss of each of this rank's micro-batches of (x, y), one forward pass each."""
    for xb, yb in parallel.micro_batches(x, y, args.batch_size, args.grad_accum):
        yield model(ag.Tensor(xb, device=args.device), ag.Tensor(yb, device=args.device))[1]


def accumulate_gradients(model, x, y, args):
    """Forward and backward over this rank's micro-batches of (x, y); their mean loss.

    Each micro-batch's loss is scaled by 1/grad_accum, so the gradients the
    backward passes add up are those of the mean loss.
    """
    total = 0.0
    for loss in micro_batch_losses(model, x, y, args):
        (loss / args.grad_accum).backward()
        total += loss.item()
    return total / args.grad_accum


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
    """Model, tokenizer, data, optimizer, data generator and run state: fresh, or as the checkpoint left them.

    None when the checkpoint to resume is already at --max-iters.
    """
    state = {"iter": 0, "history": [], "evals": [], "val_loss": math.inf}
    if args.resume:
        state = checkpoint.load_state(out_dir)
        for line in checkpoint.resume_options(args, state, args.given, MODEL_OPTIONS, make_parser().check, out_dir,
                                              more=lambda now: parallel.layout_change(state.get("batch"), now)):
            print(line)
        check_combinations(args)
        if state["iter"] >= args.max_iters:
            print(f"train: the checkpoint in {out_dir} is at iteration {state['iter']} and --max-iters is "
                  f"{args.max_iters}: nothing to do (raise --max-iters to train on)")
            return None
    model, tokenizer, data = build(args, out_dir)
    parallel.seed_followers(args.seed)
    optimizer = nn.optim.AdamW(model.optimizer_groups(args.weight_decay), lr=args.lr,
                               betas=(args.beta1, args.beta2))
    data_rng = np.random.default_rng(args.seed)
    if args.resume:
        checkpoint.restore_optimizer(out_dir, optimizer, state)
        data_rng.bit_generator.state = state["data_rng"]
        parallel.restore_rng(state, args.seed)
        print(f"resume: from iteration {state['iter']} of {out_dir} (val loss {state['val_loss']:.4f})")
    return model, tokenizer, data, optimizer, data_rng, state


def train(args):
    out_dir = Path(args.out_dir)
    parallel.on_root(lambda: checkpoint.recover(out_dir))  # the other ranks read the checkpoint once it is whole
    prepared = parallel.agree(lambda: prepare(args, out_dir))
    if prepared is None:
        return
    model, tokenizer, data, optimizer, data_rng, state = prepared
    dist.broadcast_parameters(model)  # every rank starts from rank 0's weights
    cfg = model.config
    saved = {"iter": state["iter"] if args.resume else None, "val_loss": state["val_loss"]}
    options = {k: v for k, v in vars(args).items() if k not in RUN_OPTIONS and k != "given"}
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
    schedule = nn.optim.WarmupCosineLR(optimizer, args.warmup_iters, args.lr_decay_iters or args.max_iters,
                                       args.min_lr, max_lr=args.lr, last_step=start_iter - 1)
    step_seconds = comm_seconds = 0.0
    for it in range(start_iter, args.max_iters + 1):
        if (it % args.eval_interval == 0 or it == args.max_iters) and not (args.resume and it == start_iter):
            losses = estimate_loss(model, data, args, it)
            for value in losses.values():
                check_finite(value, it, optimizer, saved, out_dir)
            state["evals"].append({"iter": it, **losses})
            note = ""
            if it > 0 and (losses["val"] < saved["val_loss"] or args.always_save):
                state.update(iter=it, val_loss=losses["val"], data_rng=data_rng.bit_generator.state, batch=layout,
                             options=options, **parallel.rng_states())
                parallel.on_root(lambda: checkpoint.save(out_dir, model, tokenizer, optimizer, state))
                saved.update(iter=it, val_loss=losses["val"])
                note = "; saved"
            elif it > 0:
                note = f"; not saved: the checkpoint's val loss (iteration {saved['iter']}) is {saved['val_loss']:.4f}"
            log(f"iter {it:5d}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}{note}")
        if it == args.max_iters:
            break
        t0, comm0 = time.perf_counter(), dist.comm_seconds
        x, y = data.batch("train", rows_per_iter, args.block_size, data_rng)  # the iteration's rows, alike on all ranks
        optimizer.zero_grad()
        local_loss = parallel.agree(lambda: accumulate_gradients(model, x, y, args))
        loss_value = parallel.mean_over_ranks([local_loss])[0]
        check_finite(loss_value, it, optimizer, saved, out_dir)  # every rank alike, before the update
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
        schedule.step()
    bar.close()
    parallel.separate()  # no rank waits for another from here: Ctrl-C stops each at once
    if dist.rank > 0:
        return  # rank 0 alone plots, reports and samples

    print(saved_summary(saved, args.max_iters, out_dir))
    if state["history"]:
        plot_losses(out_dir / checkpoint.PLOT_FILE, state["history"], state["evals"])
        print(f"wrote the loss curve to {out_dir / checkpoint.PLOT_FILE}")
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


def check_finite(loss, it, optimizer, saved, out_dir):
    """Stop, before anything of this iteration is saved, when a loss is NaN or infinite."""
    if not math.isfinite(loss):
        kept = (f"{out_dir} keeps the checkpoint of iteration {saved['iter']}" if saved["iter"] is not None
                else "no checkpoint was written")
        raise ValueError(f"the loss became {loss} at iteration {it} (lr {optimizer.param_groups[0]['lr']:.2e}); "
                         f"stopped, and {kept}; try a smaller --lr or a --grad-clip")


def saved_summary(saved, max_iters, out_dir):
    """One line: which checkpoint the folder holds after this run, and why."""
    if saved["iter"] is None:
        return "no checkpoint written" + (": --max-iters 0 trains nothing" if max_iters == 0 else "")
    line = f"{out_dir}/ holds the checkpoint of iteration {saved['iter']} (val loss {saved['val_loss']:.4f})"
    if saved["iter"] < max_iters:
        line += "; later evaluations did not improve on it (--always-save saves every one)"
    return line


def report(error):
    """Print this rank's line about `error`, if it owes one (see parallel.error_prefix); the exit status."""
    message = error.args[0] if isinstance(error, KeyError) and error.args else error
    if isinstance(error, MemoryError):
        message = f"out of memory ({error or 'MemoryError'}); try a smaller model or --batch-size"
    prefix = parallel.error_prefix(error)
    if prefix is not None:
        print(f"train: error: {prefix}{message}", file=sys.stderr)
    return 1


def main(argv=None):
    ag.keep_freed_memory()  # each step reuses freed arrays rather than faulting in fresh pages (see its docstring)
    try:
        dist.init()  # a job is joined first: its ranks must agree on the options (alone, nothing to join)
    except dist.DistributedError as exc:
        return report(exc)
    args = parallel.parse_alike(lambda: parse_args(argv))
    try:
        with warnings.catch_warnings(), parallel.followers_quiet():  # rank 0 speaks for all; a rank that fails says why
            warnings.simplefilter("ignore", RuntimeWarning)  # overflow on the way to a NaN: check_finite says it once
            dist.init(args.device)
            with parallel.interrupts_agreed(), parallel.held_on_root(checkpoint.writer_lock(args.out_dir)):
                train(args)
    except parallel.PeerFailed:
        return 1  # the rank that failed has said why
    except (ValueError, OSError, KeyError, MemoryError, dist.DistributedError) as exc:
        return report(exc)
    except KeyboardInterrupt:
        if dist.rank == 0:
            iteration = checkpoint.saved_iteration(args.out_dir)
            kept = (f"{args.out_dir} holds the checkpoint of iteration {iteration}" if iteration is not None
                    else "no checkpoint was written")
            print(f"\ntrain: interrupted; {kept}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
