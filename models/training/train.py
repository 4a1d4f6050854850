"""python -m models.train: train a GPT on Shakespeare (or your text), the project's main job.

Defaults are nanoGPT's CPU run of shakespeare_char (characters, 4 layers,
4 heads, 128 wide, blocks of 64, batches of 12, 2000 iterations of AdamW with
warmup + cosine decay and gradient clipping; train and val loss every 250),
except a peak learning rate of 2e-3 instead of 1e-3: measured here, it ends
at val loss 1.80 instead of 1.91 in the same 2000 iterations.
It writes a checkpoint folder (weights and config in Hugging Face's GPT-2
format, tokenizer, optimizer and run state; see models/training/checkpoint.py)
whenever the val loss improves (or at every evaluation with --always-save), from
which `--resume` continues exactly, a loss-curve PNG, and prints a sample.
Options are checked as they are parsed; a folder that holds a checkpoint is
only continued (--resume) or replaced (--overwrite), never overwritten unasked.
`--preset shakespeare-char` sets nanoGPT's GPU recipe at once (options given
beside it win); `--eval-only` evaluates a checkpoint once and writes nothing.
Progress shows as a bar on a terminal, else as a plain line every --log-interval.
`mpiexec -n N python -m models.train` trains data-parallel on N processes
(see models/training/parallel.py): the same checkpoints, any N.
`--detect-anomaly` stops at the first op that makes NaN/inf and names it
(autograd/anomaly.py); `--health-interval N` records gradient, update and
activation health every N iterations (models/training/health.py). Both off,
the run is bit-for-bit what it is without them.

Read `train` first: the loop, as nanoGPT's, batch → forward/backward → clip →
step, with an evaluation (and perhaps a save) every --eval-interval.
"""

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import autograd as ag
import nn
from models.training import checkpoint, health
from models.cli import (SEEDS, Parser, counted, device, folder_path, interval, machine_memory, output_folder,
                        show_default, shows_progress)
from models.training.data import DEFAULT_CORPUS, Layout, TokenData, load_text
from models.gpt import sampling
from models.gpt.gpt2 import GPT, LINEAR_LAYERS, GPTConfig
from models.interrupts import came_from_ctrl_c
from models.io import write_figure
from models.training.parallel import PeerFailed, World
from models.training.shards import PreparedData, check_tokenizer, data_path
from models.gpt.tokenizer import CharTokenizer, GPT2Tokenizer
from nn import distributed as dist

POSITIVE, COUNT = interval(int, "[1, inf)"), interval(int, "[0, inf)")


def positive_or_none(text):
    """A `type=` function: POSITIVE's integer, or "none" for the option's default (which a resumed run's saved
    value would otherwise replace)."""
    return None if text == "none" else POSITIVE(text)

# nanoGPT's config/train_shakespeare_char.py: its "baby GPT" for one GPU (minutes there, hours on a CPU).
SHAKESPEARE_CHAR = {"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256, "dropout": 0.2, "batch_size": 64,
                    "grad_accum": 1, "lr": 1e-3, "max_iters": 5000, "lr_decay_iters": 5000, "min_lr": 1e-4,
                    "beta2": 0.99, "warmup_iters": 100, "eval_interval": 250, "eval_iters": 200, "log_interval": 10}


def presets(parser):
    """Each --preset's name → the options it sets; cpu-small is this program's own defaults for those options."""
    return {"shakespeare-char": SHAKESPEARE_CHAR,
            "cpu-small": {name: parser.get_default(name) for name in SHAKESPEARE_CHAR}}


# nanoGPT's names (dashed) for options this program spells otherwise: the hint for an unrecognized option.
NANOGPT_NAMES = {"--learning-rate": "--lr", "--gradient-accumulation-steps": "--grad-accum",
                 "--always-save-checkpoint": "--always-save"}


def make_parser():
    p = Parser("python -m models.train", __doc__.splitlines()[0], renamed=NANOGPT_NAMES)
    preset_group = p.add_argument_group("preset")
    g = p.add_argument_group("data")
    g.add_argument("--data", type=data_path, default=None, metavar="PATH",
                   help="a UTF-8 text file (default: the shipped Tiny Shakespeare), or a folder of token shards "
                        "that python -m models.prepare made")
    g.add_argument("--tokenizer", choices=["char", "gpt2"], default="char",
                   help="characters, or GPT-2's byte-level BPE (--init-from brings its own)")
    g = p.add_argument_group("model")
    g.add_argument("--n-layer", type=POSITIVE, default=4, help="transformer blocks")
    g.add_argument("--n-head", type=POSITIVE, default=4, help="attention heads per block")
    g.add_argument("--n-embd", type=POSITIVE, default=128, help="the width: features per token")
    g.add_argument("--block-size", type=POSITIVE, default=64, help="context length in tokens")
    g.add_argument("--dropout", type=interval(float, "[0, 1)"), default=0.0, help="dropout probability")
    g.add_argument("--no-bias", action="store_true", help="no biases in Linear and LayerNorm")
    g.add_argument("--init-from", type=checkpoint.model_folder, default=None, metavar="DIR",
                   help="fine-tune a Hugging Face GPT-2 folder (config.json + model.safetensors) or a checkpoint "
                        "(default: none, a new model)")
    g = p.add_argument_group("fine-tuning with LoRA (nn.lora) and less memory")
    g.add_argument("--lora-r", type=POSITIVE, default=None,
                   help="with --init-from: freeze the model and train rank-r adapters of the --lora-targets layers; "
                        "the checkpoint then holds the adapters alone (default: none, a full fine-tune)")
    g.add_argument("--lora-alpha", type=interval(float, "(0, inf)"), default=16.0,
                   help="the adapters' scale: their update is B·A·alpha/r")
    g.add_argument("--lora-targets", default="c_attn", type=lora_targets, metavar="NAMES",
                   help=f"comma-separated names of the Linear layers to adapt ({', '.join(LINEAR_LAYERS)})")
    # --no-…: a resumed run that had it may turn it off (a saved option is the run's until the command line says)
    g.add_argument("--checkpoint-blocks", action=argparse.BooleanOptionalAction, default=False,
                   help="keep only each block's input and recompute its activations in backward (ag.checkpoint): "
                        "less memory for about a third more time; the same numbers bit for bit")
    g = p.add_argument_group("optimisation")
    g.add_argument("--batch-size", type=POSITIVE, default=12, help="rows per micro-batch on each process")
    g.add_argument("--grad-accum", type=POSITIVE, default=1,
                   help="micro-batches per optimizer step; the step sees batch x grad-accum x processes rows")
    g.add_argument("--max-iters", type=COUNT, default=2000, help="optimizer steps in all")
    g.add_argument("--lr", type=interval(float, "(0, inf)"), default=2e-3, help="peak learning rate")
    g.add_argument("--min-lr", type=interval(float, "[0, inf)"), default=1e-4, help="learning rate after the decay")
    g.add_argument("--warmup-iters", type=COUNT, default=100, help="steps of linear warm-up to --lr")
    g.add_argument("--lr-decay-iters", type=positive_or_none, default=None,
                   help="the step where the cosine decay reaches --min-lr; 'none' gives a resumed run this default "
                        "back (default: none, --max-iters)")
    g.add_argument("--weight-decay", type=interval(float, "[0, inf)"), default=0.1,
                   help="AdamW's decoupled weight decay, of the matrices only")
    g.add_argument("--beta1", type=interval(float, "[0, 1)"), default=0.9, help="AdamW's first-moment decay")
    g.add_argument("--beta2", type=interval(float, "[0, 1)"), default=0.99, help="AdamW's second-moment decay")
    g.add_argument("--grad-clip", type=interval(float, "[0, inf)"), default=1.0,
                   help="the maximum global gradient norm: a step whose gradients' norm (all parameters together) "
                        "exceeds it is scaled down to it (0: no clipping)")
    g = p.add_argument_group("run")
    g.add_argument("--eval-interval", type=POSITIVE, default=250, help="steps between train/val loss estimates")
    g.add_argument("--eval-iters", type=POSITIVE, default=50, help="batches per loss estimate")
    g.add_argument("--eval-only", action="store_true",
                   help="estimate train and val loss of the checkpoint in --out-dir (or of --init-from) once, "
                        "print them and exit, writing nothing")
    g.add_argument("--always-save", action=argparse.BooleanOptionalAction, default=False,
                   help="save at every evaluation, not only when the val loss improves on the checkpoint's")
    # training's checks that it can write there (output_folder) wait for the other options: --eval-only writes
    # nothing, so it evaluates a checkpoint in a read-only folder too
    g.add_argument("--out-dir", type=folder_path, default="out", help="the checkpoint folder")
    g.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out-dir")
    g.add_argument("--overwrite", action="store_true", help="replace the checkpoint in --out-dir with a new run")
    g.add_argument("--seed", type=interval(int, SEEDS), default=1337,
                   help="seeds the initial weights, the batches and dropout")
    g.add_argument("--device", type=device, default="cpu", metavar="{cpu,cuda}",
                   help="where the model trains (cuda: the GPU, through CuPy)")
    g.add_argument("--pad-vocab", type=POSITIVE, default=None, metavar="N",
                   help="round the embedding table's rows up to a multiple of N (padding rows are never a "
                        "token; checkpoints keep the real vocabulary) (default: 64 on cuda, 1 on cpu)")
    g.add_argument("--peak-tflops", type=interval(float, "(0, inf)"), default=None,
                   help="one process's hardware peak in TFLOP/s, the yardstick of model-FLOPs utilisation (MFU) "
                        "(default: none, measured: the fastest of repeated float32 1024 x 1024 matmuls, at the "
                        "start and again at every evaluation, so that a measurement slowed by other work is "
                        "replaced; a resumed run keeps the checkpoint's where that was faster; give it to compare "
                        "runs on one yardstick)")
    g.add_argument("--sample-tokens", type=COUNT, default=300, help="length of the sample printed at the end")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress bar: plain log lines, as when stderr is not a terminal")
    g.add_argument("--log-interval", type=COUNT, default=10,
                   help="steps between the plain log lines printed instead of a bar (0: none)")
    settings = {name: ", ".join(f"{key.replace('_', '-')} {show_default(value)}" for key, value in preset.items())
                for name, preset in presets(p).items()}
    preset_group.add_argument("--preset", choices=sorted(settings), default=None,
                              help=f"shakespeare-char: nanoGPT's config/train_shakespeare_char.py, a recipe for one "
                                   f"GPU ({settings['shakespeare-char']}); cpu-small: this program's defaults, "
                                   f"nanoGPT's CPU run of it ({settings['cpu-small']}). An option given beside a "
                                   "preset wins, and a line says so (default: none, each option's own default)")
    g = p.add_argument_group("diagnostics")
    g.add_argument("--detect-anomaly", action="store_true",
                   help="stop at the first op that makes NaN/inf, naming it (autograd.detect_anomaly); with viz, "
                        "its pictures go to --out-dir")
    g.add_argument("--health-interval", type=COUNT, nargs="?", const=50, default=0, metavar="N",
                   help=f"every N iterations (N=50 if not given) record gradient, update and activation health "
                        f"in {health.JSONL_FILE} and {health.PLOT_FILE} in --out-dir, and warn (0: off)")
    return p


def parse_args(argv=None):
    p = make_parser()
    args = p.parse_args(argv)
    args.given = p.given(argv, args)
    try:
        if not args.eval_only:
            try:
                output_folder(args.out_dir)
            except argparse.ArgumentTypeError as exc:
                raise ValueError(f"argument --out-dir: {exc}") from None
        if args.resume and args.overwrite:
            raise ValueError("--resume continues the checkpoint and --overwrite replaces it: choose one")
        if args.preset:
            apply_preset(args, presets(p)[args.preset])
        if args.eval_only:
            check_eval_only(args)
        else:
            checkpoint.check_out_dir(Path(args.out_dir), args.resume, args.overwrite)
        if args.resume and "block_size" in args.given:  # from the checkpoint's config.json, before a weight loads
            positions = checkpoint.config_of(args.out_dir).block_size
            if args.block_size > positions:
                raise ValueError(f"--block-size {args.block_size} exceeds the block_size {positions} of the "
                                 f"checkpoint's model in {args.out_dir}, which it fixes; resume with --block-size "
                                 f"{positions} or less")
        if not args.resume:
            check_combinations(args)
    except (ValueError, OSError) as exc:  # OSError: a file read here (--eval-only's checkpoint) that cannot be read
        p.error(str(exc))
    return args


def apply_preset(args, preset):
    """The preset's values, except where the command line gives an option itself (then one line says so).

    The preset's options then count as given: on --resume they replace the
    checkpoint's, as typed ones would, and the checkpoint stores the values.
    """
    kept = [f"--{name.replace('_', '-')} {getattr(args, name)} (the preset's {show_default(value)})"
            for name, value in preset.items() if name in args.given and getattr(args, name) != value]
    for name, value in preset.items():
        if name not in args.given:
            setattr(args, name, value)
    args.given |= set(preset)
    if kept:
        print(f"preset {args.preset}: the command line's {', '.join(kept)} win{'s' if len(kept) == 1 else ''}")


def check_eval_only(args):
    """--eval-only reads --init-from, or else the checkpoint in --out-dir with its options, as --resume would."""
    if args.overwrite:
        raise ValueError("--eval-only writes nothing, so there is nothing for --overwrite to replace")
    if args.init_from:
        if args.resume:
            raise ValueError(f"--eval-only evaluates --init-from {args.init_from}, --resume the checkpoint in "
                             f"{args.out_dir}: choose one")
        return
    if checkpoint.saved_iteration(args.out_dir) is None:
        if (Path(args.out_dir) / checkpoint.STATE_FILE).exists():
            checkpoint.RunState.load(args.out_dir)  # a damaged checkpoint: its own error says what is wrong
        raise ValueError(f"--eval-only: no checkpoint in {args.out_dir} to evaluate; give the --out-dir of a run, "
                         "or --init-from DIR")
    args.resume = True


def lora_targets(text):
    """A `type=` function: --lora-targets' names, each one of GPT-2's Linear layers (refused here, not after the
    weights and the text have loaded)."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated layer names such as c_attn,c_proj, got {text!r}")
    unknown = [name for name in names if name not in LINEAR_LAYERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"GPT-2 has no Linear layer named {', '.join(map(repr, unknown))}; "
                                         f"choose among {', '.join(LINEAR_LAYERS)}")
    repeated = sorted({name for name in names if names.count(name) > 1}, key=names.index)
    if repeated:  # each name adapts every layer it names once; a repeat would only be echoed back and saved
        raise argparse.ArgumentTypeError(f"{', '.join(map(repr, repeated))} named more than once in {text!r}; "
                                         "give each layer name once")
    return names


def check_combinations(args):
    """Options that are each in range but make no sense together (on --resume, after the checkpoint's are in)."""
    if not args.lora_r and not args.resume:  # on --resume the checkpoint fixes them, and resume says so
        needless = [f"--{name.replace('_', '-')}" for name in ("lora_alpha", "lora_targets") if name in args.given]
        if needless:
            raise ValueError(f"{' and '.join(needless)} shape{'s' * (len(needless) == 1)} LoRA adapters, which "
                             "only --lora-r R makes; give --lora-r, or leave them out for a full fine-tune")
    if args.lora_r and not args.init_from:
        raise ValueError(f"--lora-r {args.lora_r} adapts a trained model: give it one with --init-from DIR")
    if args.min_lr > args.lr:
        raise ValueError(f"--min-lr {args.min_lr} exceeds the peak --lr {args.lr}")
    if args.lr_decay_iters is not None and args.lr_decay_iters <= args.warmup_iters:
        # warmup_cosine warms up first: the lr would climb to --lr and fall to --min-lr in one step, never decaying
        raise ValueError(f"--lr-decay-iters {args.lr_decay_iters} does not come after the --warmup-iters "
                         f"{counted(args.warmup_iters, 'step')} of warm-up, so the lr would jump from --lr to "
                         f"--min-lr with no decay between; give --lr-decay-iters above {args.warmup_iters}, or fewer "
                         "--warmup-iters")
    if args.lora_r and args.init_from and not args.eval_only \
            and Path(args.init_from).resolve() == Path(args.out_dir).resolve():
        # its checkpoint holds the adapters alone and names --init-from as their base: a save there deletes the base
        raise ValueError(f"--lora-r {args.lora_r} saves the adapters alone, which need their base --init-from "
                         f"{args.init_from}, and --out-dir {args.out_dir} is that folder, which a save replaces; "
                         "give the checkpoints another --out-dir")
    writer = checkpoint.writer_of(args.init_from) if args.lora_r and args.init_from and not args.eval_only else None
    if writer is not None:  # its next save would replace the base that the adapters name by its weights' SHA-256
        raise ValueError(f"--init-from {args.init_from} is being written by another training run (process {writer}), "
                         f"whose next save replaces the weights that --lora-r {args.lora_r}'s adapters are trained "
                         "on; wait for it to end, or adapt a copy of the folder")
    if args.init_from and not args.resume:  # refused from its config.json, before the weights and the text load
        config = checkpoint.config_of(args.init_from)
        positions, width = config.block_size, config.n_embd
        if args.lora_r and args.lora_r > width:  # every Linear's smaller side is n_embd
            raise ValueError(f"--lora-r {args.lora_r} exceeds the width (n_embd {width}) of the model in --init-from "
                             f"{args.init_from}, the most an adapter's rank can be; use --lora-r {width} or less")
        if args.block_size > positions and "block_size" not in args.given:
            args.block_size = positions  # the default's 64 tokens were chosen for the main job's model, not this one
        elif args.block_size > positions:
            raise ValueError(f"--block-size {args.block_size} exceeds the {positions} positions of the model in "
                             f"--init-from {args.init_from}; use --block-size {positions} or less")
    if not args.init_from and not args.resume and args.n_embd % args.n_head:
        raise ValueError(f"--n-embd {args.n_embd} is not a multiple of --n-head {args.n_head}: "
                         "every head gets n_embd / n_head features")
    available = machine_memory()
    if not args.init_from and not args.resume:  # a model from a folder is no larger than its weights file
        check_memory(args, available)
    rows = args.batch_size * args.grad_accum  # what an iteration's batch and the sample need, whatever the model
    if available is not None and 16 * rows * args.block_size > available:  # an iteration's x and y, int64
        raise ValueError(f"--grad-accum {args.grad_accum} with --batch-size {args.batch_size} and --block-size "
                         f"{args.block_size} draws {rows * args.block_size:,} tokens an iteration, "
                         f"{16 * rows * args.block_size / 2 ** 30:,.1f} GiB, more than this machine's "
                         f"{available / 2 ** 30:,.1f} GiB of memory")
    sampling.check_fits_memory(1, 1 + args.sample_tokens, "--sample-tokens", available)


def check_memory(args, available):
    """Refuse a new model that cannot fit in `available` bytes, from its size alone, before anything is allocated.

    A lower bound: the parameters with their gradients and AdamW's two moments,
    and the attention weights each layer keeps for backward (a character
    tokenizer's vocabulary, unknown before the text is read, counts as one token).
    """
    vocab_size = GPTConfig.vocab_size if args.tokenizer == "gpt2" else 1
    config = GPTConfig(vocab_size=vocab_size, block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head,
                       n_embd=args.n_embd, bias=not args.no_bias)
    itemsize = ag.get_default_dtype().itemsize
    n_params = config.num_parameters()
    weights = 4 * itemsize * n_params
    attention = args.n_layer * args.batch_size * args.n_head * args.block_size ** 2 * itemsize
    need = weights + attention
    if available is not None and need > available:
        raise ValueError(f"the model (--n-layer {args.n_layer}, --n-embd {args.n_embd}, --block-size "
                         f"{args.block_size}) has {n_params:.3g} parameters, and training it with --batch-size "
                         f"{args.batch_size} needs at least {need / 2 ** 30:,.1f} GiB ({weights / 2 ** 30:,.1f}"
                         f" for each parameter's {itemsize}-byte weight, gradient and two AdamW moments, "
                         f"{attention / 2 ** 30:,.1f} for the attention weights every layer keeps), but this machine "
                         f"has {available / 2 ** 30:,.1f} GiB of memory: choose a smaller model or batch")


def option_facts(args):
    """The options, as every rank of a job must have them alike (World.agree)."""
    return {"--" + name.replace("_", "-"): "none (the default)" if value is None else value
            for name, value in vars(args).items() if name != "given"}


def started_facts(args, started):
    """What every rank must have alike once `start` returned `started` (None: nothing to do): the options with the
    checkpoint's merged in, the run state (its digest covers the checkpoint's weights and optimizer), the data and
    the model's shape."""
    facts = option_facts(args)
    if started is None:
        facts["the run state"] = "a checkpoint at --max-iters already, nothing to do"
        return facts
    model, tokenizer, data, optimizer, run = started
    cfg = model.config
    # without the data's fingerprint: ranks that read other data disagree on "the data", which says how
    state = {key: value for key, value in run.to_json(run.digests).items() if key != "data_fingerprint"}
    state = hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()
    facts["the run state"] = f"iteration {run.iter}, val loss {run.val_loss:.4f} (SHA-256 {state[:12]})"
    facts["the data"] = run.data_fingerprint  # start() took it, for the checkpoint
    facts["the model"] = (f"{counted(cfg.n_layer, 'layer')}, {counted(cfg.n_head, 'head')}, {cfg.n_embd} wide, "
                          f"block {cfg.block_size}, vocab {cfg.vocab_size}, bias {cfg.bias}")
    return facts


def measure_peak_flops(device, n=1024, warm_up=2, at_least=8, seconds=0.3):
    """FLOP/s of an n x n float32 matmul on this device: the yardstick for model-FLOPs utilisation.

    The fastest of at least `at_least` timed runs, and of as many as `seconds`
    allows, after `warm_up` untimed ones (BLAS starts its threads, the caches
    fill): other work on the machine only ever slows a run down, so the fastest
    is the least disturbed.
    """
    a = ag.ones(n, n, dtype="float32", device=device)
    times, started = [], time.perf_counter()
    while len(times) < warm_up + at_least or time.perf_counter() - started < seconds:
        start = time.perf_counter()
        (a @ a)[0, 0].item()  # reading a value waits for an asynchronous GPU
        times.append(time.perf_counter() - start)
    return 2 * n ** 3 / min(times[warm_up:])


def train(args, world):
    out_dir = Path(args.out_dir)
    world.on_root(checkpoint.recover, out_dir)  # the other ranks read the checkpoint once it is whole
    with world.together():
        started = start(args, world)
    world.agree(started_facts(args, started))
    if started is None:
        return
    model, tokenizer, data, optimizer, run = started
    world.broadcast_parameters(model)  # every rank starts from rank 0's weights
    progress = Progress(args, world, model, data, run)
    schedule = nn.optim.WarmupCosineLR(optimizer, args.warmup_iters, args.lr_decay_iters or args.max_iters,
                                       args.min_lr, max_lr=args.lr, last_step=run.iter - 1)
    resumed_at = run.iter if args.resume else None  # that evaluation is the checkpoint's own
    # rank 0 alone reads and writes the health report: where it cannot (a full disk), every rank must stop, not wait
    with world.together():
        monitor = health.Health(model, args.health_interval if world.is_root else 0, out_dir, args.grad_clip,
                                args.batch_size, progress.say, start=run.iter)  # a resumed run continues the report
    anomaly = anomaly_mode(args, run, world)
    try:
        for it in range(run.iter, args.max_iters + 1):
            if (it % args.eval_interval == 0 or it == args.max_iters) and it != resumed_at:
                evaluate(model, tokenizer, optimizer, data, run, args, world, progress.say)
                progress.remeasure_peak()
            if it == args.max_iters:
                break
            progress.begin()
            optimizer.zero_grad()
            with world.together(), anomaly:  # a shard first read here is checked: a rank that finds it damaged says so
                x, y = data.batch("train", run.layout.rows, args.block_size, run.data_rng)  # alike on every rank
                local_loss = accumulate_gradients(model, x, y, run.layout, world.rank, args)
            loss = world.mean([local_loss])[0]
            check_finite(loss, run, optimizer, out_dir)  # every rank alike, before the update
            world.all_reduce_gradients(model)
            with world.together() if health.due(args.health_interval, it) else contextlib.nullcontext():  # rank 0 records it, as above
                monitor.after_backward(it, x)
                if args.grad_clip:
                    nn.optim.clip_grad_norm_(model.parameters(), args.grad_clip)
                optimizer.step()
                monitor.after_step(it)
            schedule.step()
            run.record(loss)
            progress.end(run.iter, loss)
    except (ValueError, ag.AnomalyError) as exc:  # a NaN loss, an anomaly, a damaged shard: the report so far
        try:
            monitor.close()
        except OSError as failed:  # the run's own error is the one to report; this one gets a line of its own
            print(f"train: the health report could not be drawn: {failed.strerror or failed}", file=sys.stderr)
        if isinstance(exc, ag.AnomalyError):  # the same exception, told more: an MPI rank reports what it raised
            exc.args = (f"{exc}\n  stopped, and {kept_checkpoint(run, out_dir)}",)
        raise
    progress.close()
    monitor.close()
    world.separate()  # no rank waits for another from here: Ctrl-C stops each at once
    if world.is_root:  # rank 0 alone plots, reports and samples
        finish(model, tokenizer, data, run, args, progress)


def start(args, world):
    """Model, tokenizer, data, optimizer and run state: fresh, fine-tuned from --init-from, or as the checkpoint
    in --out-dir left them (`checkpoint.resume`). None when that checkpoint is already at --max-iters (and this
    is a training run, not --eval-only)."""
    out_dir = Path(args.out_dir)
    if args.resume:
        model, tokenizer, optimizer_state, run = checkpoint.resume(out_dir, args, make_parser().check, world)
        check_combinations(args)
        if run.iter >= args.max_iters and not args.eval_only:
            print(f"train: the checkpoint in {out_dir} is at iteration {run.iter} and --max-iters is "
                  f"{args.max_iters}: nothing to do (raise --max-iters to train on)")
            return None
    prepared = PreparedData(args.data) if args.data is not None and Path(args.data).is_dir() else None
    text = None if prepared else load_text(args.data)
    if args.resume:
        check_data_tokens(tokenizer, prepared, text, out_dir)
    else:
        model, tokenizer = new_model(args, text, prepared)
    if args.block_size > model.config.block_size:
        raise ValueError(f"--block-size {args.block_size} exceeds the model's block_size {model.config.block_size}")
    data = prepared or TokenData(tokenizer.encode_array(text))
    fingerprint = data.fingerprint(tokenizer)  # the tokens this run trains on, which a resumed run must be given
    if args.resume:  # before a step is taken
        checkpoint.check_data(out_dir, run, fingerprint, args.data or DEFAULT_CORPUS)
    data.check_fits(args.block_size)
    model.to(args.device)
    model.pad_vocab(args.pad_vocab or (64 if args.device == "cuda" else 1))  # GPT-2 on a GPU: 50,304 rows
    model.transformer.checkpoint_blocks = args.checkpoint_blocks
    options = checkpoint.saved_paths({k: v for k, v in vars(args).items() if checkpoint.is_stored(k)}, out_dir)
    # every gradient a view of one buffer: clipping is one reduction, its factor applied by AdamW in one kernel
    # call per group (on the CPU 0.45 ms a step less than per parameter, in the main job)
    optimizer = nn.optim.AdamW(model.optimizer_groups(args.weight_decay), lr=args.lr,
                               betas=(args.beta1, args.beta2), flat_grads=True)
    if args.resume:
        checkpoint.restore_optimizer(optimizer, optimizer_state, out_dir)
        run.options = options  # the next save keeps what this run trains with
        if not args.eval_only:
            print(f"resume: from iteration {run.iter} of {out_dir} (val loss {run.val_loss:.4f})")
    else:
        run = checkpoint.RunState.start(options, Layout(args.batch_size, args.grad_accum, world.size),
                                        args.seed, world, fingerprint)
    return model, tokenizer, data, optimizer, run


def new_model(args, text, prepared=None):
    """A model and its tokenizer: fresh (a character tokenizer built from `text`, or GPT-2's, or the one that made
    the `prepared` shards), or --init-from's."""
    ag.manual_seed(args.seed)  # the initial weights (or adapters), then dropout, draw from --seed
    if args.init_from:
        ignored = [f"--{name.replace('_', '-')}" for name in checkpoint.MODEL_OPTIONS
                   if name in args.given and name != "init_from" and not name.startswith("lora_")]
        if ignored:
            print(f"init-from: the model and its tokenizer come from {args.init_from}, so {', '.join(ignored)} "
                  f"{'does' if len(ignored) == 1 else 'do'} not apply")
        tokenizer = checkpoint.load_tokenizer(args.init_from)
        check_data_tokens(tokenizer, prepared, text, args.init_from)  # before a weight is read
        model = checkpoint.load_weights(args.init_from, dropout=args.dropout)
        # a full fine-tune trains (and saves) the rows it uses; LoRA freezes the base's table, which stays whole:
        # the adapted model, its samples and its export then have the base's context
        if args.block_size < model.config.block_size and not (args.lora_r or getattr(model, "lora_base", None)):
            model.crop_block_size(args.block_size)
        if args.lora_r:
            if getattr(model, "lora_base", None):
                raise ValueError(f"--init-from {args.init_from} holds LoRA adapters already; merge them first "
                                 "(python -m models.export_merged) and fine-tune the merged folder")
            layers = checkpoint.adapt(model, args.init_from, args.lora_r, args.lora_alpha, args.lora_targets)
            print(f"lora: rank {args.lora_r} adapters in {len(layers)} layers ({', '.join(args.lora_targets)}); "
                  f"{model.num_parameters(trainable=True):,} of {model.num_parameters():,} parameters train")
        elif getattr(model, "lora_base", None):  # not the full fine-tune that no --lora-r means elsewhere: say so
            print(f"lora: {args.init_from} holds rank {model.lora_base['r']} adapters "
                  f"({', '.join(model.lora_base['targets'])}), which train on with their base frozen; "
                  f"{model.num_parameters(trainable=True):,} of {model.num_parameters():,} parameters train (to "
                  "fine-tune them all, merge the adapters first: python -m models.export_merged)")
        return model, tokenizer
    if prepared:
        tokenizer = prepared.tokenizer()
        if "tokenizer" in args.given and args.tokenizer != tokenizer.kind:
            raise ValueError(f"--tokenizer {args.tokenizer}, but {args.data} holds tokens of the {tokenizer.kind} "
                             f"tokenizer; prepare the text again with --tokenizer {args.tokenizer}, or leave it out")
        args.tokenizer = tokenizer.kind
    else:
        tokenizer = GPT2Tokenizer() if args.tokenizer == "gpt2" else CharTokenizer(text)
    config = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=args.block_size, n_layer=args.n_layer,
                       n_head=args.n_head, n_embd=args.n_embd, dropout=args.dropout, bias=not args.no_bias)
    return GPT(config), tokenizer


def check_data_tokens(tokenizer, prepared, text, source):
    """A one-line error unless the data, the `prepared` shards or `text`, can be read in the tokens of `tokenizer`,
    `source`'s (a checkpoint's, or --init-from's), which are fixed with its weights: shards another tokenizer made,
    or characters a character tokenizer lacks, named with what can be done about them."""
    if prepared:
        check_tokenizer(prepared, tokenizer, source)
    elif isinstance(tokenizer, CharTokenizer):
        missing = sorted(set(text) - set(tokenizer.chars))
        if missing:
            listed = ", ".join(repr(ch) for ch in missing[:10]) + (", …" if len(missing) > 10 else "")
            raise ValueError(f"the data has {counted(len(missing), 'character')} that the "
                             f"model in {source} has no token for ({listed}): its {tokenizer.vocab_size} "
                             "characters are fixed with its weights. Train a new model on this text (without "
                             "--resume or --init-from), or remove or replace those characters in the data")


def evaluate_only(args, world):
    """--eval-only: both losses of the checkpoint (or --init-from's model) on the data, once, in one line."""
    with world.together():
        model, tokenizer, data, optimizer, run = start(args, world)
    losses = estimate_loss(model, data, run.layout, args, world, run.iter)
    # a checkpoint's saved options hold its own --init-from: that names the base, not what was evaluated
    source = f"the checkpoint in {args.out_dir} (iteration {run.iter})" if args.resume else args.init_from
    print(f"eval-only: {source}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f} "
          f"({counted(args.eval_iters, 'batch', 'batches')} of {run.layout.rows} x {args.block_size} tokens per "
          "split)")


def evaluate(model, tokenizer, optimizer, data, run, args, world, say):
    """Both losses; a save when the val loss beats the checkpoint's (or at every one with --always-save); one line."""
    it, out_dir = run.iter, Path(args.out_dir)
    losses = estimate_loss(model, data, run.layout, args, world, it)
    for value in losses.values():
        check_finite(value, run, optimizer, out_dir)
    run.evals.append({"iter": it, **losses})
    note = ""
    if it > 0 and (losses["val"] < run.val_loss or args.always_save):
        run.mark_saved(losses["val"], world)
        world.on_root(checkpoint.save, out_dir, model, tokenizer, optimizer, run)
        note = "; saved"
    elif it > 0:
        note = f"; not saved: the checkpoint's val loss (iteration {run.saved_iter}) is {run.val_loss:.4f}"
    say(f"iter {it:5d}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}{note}")


def estimate_loss(model, data, layout, args, world, it):
    """Mean loss over `eval_iters` batches per split, from a generator of its own (training's stays untouched).

    A batch has an iteration's rows, each rank evaluating its micro-batches as in training; the mean is over all.
    """
    means = []
    model.eval()
    with ag.no_grad():
        for split in ("train", "val"):
            rng = np.random.default_rng([args.seed, it, split == "val"])
            total = 0.0
            for _ in range(args.eval_iters):
                with world.together():  # per batch: a Ctrl-C stops every rank at the next one, not after them all
                    x, y = data.batch(split, layout.rows, args.block_size, rng)
                    for loss in micro_batch_losses(model, x, y, layout, world.rank, args):
                        total += loss.item()
            means.append(total / (args.eval_iters * args.grad_accum))
    model.train()
    train_loss, val_loss = world.mean(means)
    return {"train": train_loss, "val": val_loss}


def micro_batch_losses(model, x, y, layout, rank, args):
    """The loss of each of this rank's micro-batches of (x, y), one forward pass each."""
    for xb, yb in layout.micro_batches(x, y, rank):
        yield model(ag.Tensor(xb, device=args.device), ag.Tensor(yb, device=args.device), return_logits=False)[1]


def accumulate_gradients(model, x, y, layout, rank, args):
    """Forward and backward over this rank's micro-batches of (x, y); their mean loss.

    Each micro-batch's loss is scaled by 1/grad_accum, so the gradients the
    backward passes add up are those of the mean loss.
    """
    total = 0.0
    for loss in micro_batch_losses(model, x, y, layout, rank, args):
        (loss / args.grad_accum).backward()
        total += loss.item()
    return total / args.grad_accum


def anomaly_mode(args, run, world):
    """--detect-anomaly: autograd.detect_anomaly naming the iteration, its pictures in --out-dir when a package
    that draws them is installed (viz registers itself under "gptgrad.anomaly_pictures", see pyproject.toml, and
    draws when graphviz is installed); otherwise a context that does nothing. In a job rank 0 alone draws, as it
    alone writes --out-dir (every rank would write the same files, each of its own anomaly); another rank's error
    names the op all the same."""
    if not args.detect_anomaly:
        return contextlib.nullcontext()
    pictures = None
    hooks = importlib.metadata.entry_points(group="gptgrad.anomaly_pictures") if world.is_root else ()
    for hook in hooks:
        try:
            pictures = hook.load()(args.out_dir)
            break
        except ImportError:  # viz needs the graphviz package: the message still names the op
            continue
    return ag.detect_anomaly(pictures=pictures, where=lambda: f"training iteration {run.iter}")


def check_finite(loss, run, optimizer, out_dir):
    """Stop, before anything of this iteration is saved, when a loss is NaN or infinite."""
    if not math.isfinite(loss):
        raise ValueError(f"the loss became {loss} at iteration {run.iter} (lr {optimizer.param_groups[0]['lr']:.2e}); "
                         f"stopped, and {kept_checkpoint(run, out_dir)}; --detect-anomaly names the op that made it, "
                         "or try a smaller --lr or a --grad-clip")


def kept_checkpoint(run, out_dir):
    """What a run that stops early leaves: the checkpoint its last save wrote (nothing after it touched it)."""
    return (f"{out_dir} keeps the checkpoint of iteration {run.saved_iter}" if run.saved_iter is not None
            else "no checkpoint was written")


def flops_per_token(model, block_size):
    """A training step's FLOPs per token: 2 a weight for the forward, 2 for the input's gradient and 2 for the
    weight's own where it trains (PaLM's 6N; LoRA's frozen base computes no weight gradient), and attention's
    products over `block_size` positions, 12·L·H·Q·T (PaLM's appendix B, nanoGPT's estimate_mfu). N counts no
    position embedding: wpe is a table look-up, no product; wte is one, as the LM head it is tied to."""
    cfg = model.config
    position_table = model.transformer.wpe.weight
    weights = sum((6 if p.requires_grad else 4) * p.size for p in model.parameters() if p is not position_table)
    return weights + 12 * cfg.n_layer * cfg.n_embd * block_size


class Progress:
    """What a run prints as it goes: the model and data, a progress bar with tokens/s and MFU, the speed at the end."""

    def __init__(self, args, world, model, data, run):
        cfg, n_params = model.config, model.num_parameters()
        self.tokens_per_iter = run.layout.rows * args.block_size
        self.flops_per_iter = flops_per_token(model, args.block_size) * self.tokens_per_iter
        peak_source = self.settle_peak(args, world, run)
        self.world, self.device, self.measured = world, args.device, "peak_tflops" not in args.given
        self.peak = args.peak_tflops * 1e12 * world.size  # the job's: every process's
        self.remeasured = False  # since the last evaluation
        self.steps, self.step_seconds, self.comm_seconds = 0, 0.0, 0.0
        self.first_seconds = None  # this process's first step: it loads or compiles the kernels, so speed() skips it
        rows_note = f" ({run.layout.describe()})" if run.layout.rows != args.batch_size else ""
        print(f"model: {counted(cfg.n_layer, 'layer')}, {counted(cfg.n_head, 'head')}, {cfg.n_embd} wide, "
              f"block {args.block_size}, vocab {cfg.vocab_size}: {n_params:,} parameters on {args.device}")
        print(f"data: {len(data.splits['train']):,} train / {len(data.splits['val']):,} val tokens; "
              f"{self.tokens_per_iter:,} tokens per iteration{rows_note}; peak {self.peak / 1e9:,.1f} GFLOP/s for MFU "
              f"({peak_source})")

        from tqdm import tqdm
        # A bar only on a terminal: in a file or a pipe (mpiexec forwards stdout and stderr apart) its redraws
        # would interleave with the log lines, so plain lines stand in for it there.
        shows_bar = world.is_root and shows_progress(args.no_progress)
        self.bar = tqdm(total=args.max_iters, initial=run.iter, disable=not shows_bar, unit="it",
                        dynamic_ncols=True, file=sys.stderr)
        self.log_interval = 0 if shows_bar else args.log_interval
        self.say = self.bar.write if shows_bar else print

    @staticmethod
    def settle_peak(args, world, run):
        """Fix this run's peak FLOP/s per process (args.peak_tflops), kept with the checkpoint's options; what it
        came from. Unless --peak-tflops gives it, measured now (in a job, the ranks' mean); a resumed run keeps
        the checkpoint's where that is higher, so a start on a busy machine cannot lower the yardstick, nor a
        checkpoint started on one hold it low."""
        if "peak_tflops" in args.given:
            return "--peak-tflops"
        measured = world.mean([measure_peak_flops(args.device)])[0] / 1e12
        kept = args.peak_tflops  # the checkpoint's, on --resume
        args.peak_tflops = run.options["peak_tflops"] = max(measured, kept or 0.0)
        if kept and kept > measured:
            return f"the checkpoint's; {measured * 1e3:.1f} GFLOP/s measured now; re-measured at every evaluation"
        return "the fastest of repeated 1024² matmuls, re-measured at every evaluation; --peak-tflops fixes it"

    def remeasure_peak(self):
        """Measure the peak again (this process's, times the job's processes) and keep the higher yardstick."""
        if self.measured:
            self.peak = max(self.peak, measure_peak_flops(self.device, at_least=3, seconds=0.0) * self.world.size)
            self.remeasured = False

    def mfu(self, dt):
        """The MFU of a step of `dt` seconds. A step faster than the peak means the peak was measured low (the
        machine was busy then): it is measured again, once until the next evaluation, and a utilisation above
        100 % is never printed."""
        rate = self.flops_per_iter / dt
        if rate > self.peak and self.measured and not self.remeasured:
            self.remeasure_peak()
            self.remeasured = True
        if rate > self.peak:
            return "mfu n/a (faster than the peak" + (" measured" if self.measured else " --peak-tflops gives") + ")"
        return f"mfu {rate / self.peak:.1%}"

    def begin(self):
        self.t0, self.comm0 = time.perf_counter(), self.world.comm_seconds

    def end(self, iteration, loss):
        """Iteration `iteration` (counted from 1) is done, with training loss `loss`: the bar, or a log line."""
        dt = time.perf_counter() - self.t0
        if self.first_seconds is None:
            self.first_seconds = dt
        else:
            self.steps += 1
            self.step_seconds += dt
            self.comm_seconds += self.world.comm_seconds - self.comm0
        stats = f"loss {loss:.4f}, {dt * 1e3:.0f} ms, {self.tokens_per_iter / dt:,.0f} tok/s, {self.mfu(dt)}"
        if not self.bar.disable:
            self.bar.set_postfix_str(stats, refresh=False)
            self.bar.update(1)
        elif self.log_interval and iteration % self.log_interval == 0:
            print(f"iter {iteration:5d}: {stats}")

    def close(self):
        self.bar.close()

    def speed(self):
        """One line: tokens/s over this run's iterations after its first (and the share spent communicating), or
        None before two. The first is left out, as evaluations are: it loads the kernels, or compiles them on a
        cold cache, and would make a short run read several times slower than its steps are."""
        if not self.steps:
            return None
        comm = self.comm_seconds / self.steps
        comm_note = f", {comm * 1e3:.1f} ms of it communicating" if self.world.size > 1 else ""
        return (f"speed: {self.steps * self.tokens_per_iter / self.step_seconds:,.0f} tokens/s over "
                f"{counted(self.steps, 'iteration')} ({self.step_seconds / self.steps * 1e3:.1f} ms each{comm_note}; "
                f"the first iteration, {self.first_seconds * 1e3:,.0f} ms with the kernels' loading, and evaluations "
                "not counted)")


def finish(model, tokenizer, data, run, args, progress):
    """What rank 0 says at the end: which checkpoint the folder holds, the loss curve, the speed, a sample."""
    out_dir = Path(args.out_dir)
    print(saved_summary(run, args.max_iters, out_dir))
    if run.history:
        try:
            plot_losses(out_dir / checkpoint.PLOT_FILE, run.history, run.evals)
            print(f"wrote the loss curve to {out_dir / checkpoint.PLOT_FILE}")
        except OSError as exc:  # a full disk, say: the checkpoint is whole all the same, so the run goes on
            print(f"train: could not write the loss curve {out_dir / checkpoint.PLOT_FILE} ({exc.strerror or exc}); "
                  "the checkpoint beside it is whole", file=sys.stderr)
    speed = progress.speed()
    if speed:
        print(speed)
    if run.evals:
        final = run.evals[-1]
        print(f"final (iter {final['iter']}): train loss {final['train']:.4f}, val loss {final['val']:.4f}")
    if args.sample_tokens:
        model.eval()
        prompt = sample_prompt(tokenizer, data)
        out = model.generate(ag.Tensor([prompt], device=args.device), args.sample_tokens, temperature=0.8, top_k=200)
        print("sample:\n" + tokenizer.decode(out.numpy()[0].tolist()))


def saved_summary(run, max_iters, out_dir):
    """One line: which checkpoint the folder holds after this run, and why."""
    if run.saved_iter is None:
        return "no checkpoint written" + (": --max-iters 0 trains nothing" if max_iters == 0 else "")
    line = f"{out_dir}/ holds the checkpoint of iteration {run.saved_iter} (val loss {run.val_loss:.4f})"
    if run.saved_iter < max_iters:
        line += "; later evaluations did not improve on it (--always-save saves every one)"
    return line


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
    write_figure(path, fig)
    plt.close(fig)


def sample_prompt(tokenizer, data):
    """Start a sample where a document starts: <|endoftext|> for GPT-2, else a newline (or the text's first token)."""
    if isinstance(tokenizer, GPT2Tokenizer):
        return [tokenizer.eot_token]
    try:
        return tokenizer.encode("\n")
    except ValueError:
        return data.splits["train"][:1].tolist()


def report(error, world):
    """Print this rank's line about `error`, if it owes one (see World.error_prefix); the exit status."""
    message = error.args[0] if isinstance(error, KeyError) and error.args else error
    if isinstance(error, MemoryError):
        message = f"out of memory ({error or 'MemoryError'}); try a smaller model or --batch-size"
    prefix = world.error_prefix(error)
    if prefix is not None:
        print(f"train: error: {prefix}{message}", file=sys.stderr)
    return 1


def main(argv=None):
    ag.keep_freed_memory()  # each step reuses freed arrays rather than faulting in fresh pages (see its docstring)
    try:
        dist.init()  # a job is joined first: its ranks must agree on the options (alone, nothing to join)
    except dist.DistributedError as exc:
        print(f"train: error: {exc}", file=sys.stderr)
        dist.end_job()  # the ranks that did join (mpi4py on their machines) would wait for this one for ever
        return 1
    world = World()
    args = world.parse(parse_args, argv)
    try:
        # rank 0 speaks for all, a rank that fails says why; a Ctrl-C waits for the next agreement from the first on,
        # since a rank it stopped alone in agree() (a kill -INT of its own) would leave the others there for ever
        with warnings.catch_warnings(), world.followers_quiet(), world.interrupts_agreed():
            warnings.simplefilter("ignore", RuntimeWarning)  # overflow on the way to a NaN: check_finite says it once
            world.agree(option_facts(args))  # before anything that could make ranks that disagree wait for each other
            dist.init(args.device)
            lock = contextlib.nullcontext() if args.eval_only else checkpoint.writer_lock(args.out_dir)
            with world.held_on_root(lock):
                (evaluate_only if args.eval_only else train)(args, world)
    except PeerFailed:
        return 1  # the rank that failed has said why
    except (ValueError, OSError, KeyError, MemoryError, dist.DistributedError, ag.AnomalyError) as exc:
        if came_from_ctrl_c(exc):  # a Ctrl-C inside a library's cleanup, re-raised as its own error
            return interrupted(args, world)
        return report(exc, world)
    except KeyboardInterrupt:
        return interrupted(args, world)
    return 0


def interrupted(args, world):
    """Ctrl-C: one line naming the checkpoint the folder holds (the last whole save), and Ctrl-C's exit status."""
    if world.is_root:
        iteration = checkpoint.saved_iteration(args.out_dir)
        kept = (f"{args.out_dir} holds the checkpoint of iteration {iteration}" if iteration is not None
                else "no checkpoint was written")
        print(f"\ntrain: interrupted; {kept}", file=sys.stderr)
    return 130


if __name__ == "__main__":
    sys.exit(main())
