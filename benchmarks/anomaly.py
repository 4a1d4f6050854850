"""What the debugging modes cost: the main job's training step with each, against off, each mode alone in its process.

Run from the repository root, with nothing else busy:

    python -m benchmarks.anomaly [--rounds 3] [--steps 50] [--interval 50] [--threads 2]

The step is benchmarks/train_step.py's (the default GPT, 12 × 64 tokens,
AdamW + clipping). The modes, each a peer run in fresh processes, alternating:
- ours: off, as `python -m models.train` runs by default;
- ours+anomaly: every step inside `ag.detect_anomaly()` (models.train --detect-anomaly; no NaN, so no pictures);
- ours+health: the health report every --interval steps (models.train --health-interval), its cost
  spread over the steps between records, as a run pays it.
Each process runs 3 untimed steps, then times --steps steps (a multiple of --interval, so every
block holds its share of records); the figure is the median over rounds of each process's mean.
The first step's loss is printed per mode: the modes change no number. Prints; asserts nothing.
"""
import contextlib
import tempfile
import time
from pathlib import Path

from benchmarks import alone
from benchmarks.train_step import BATCH, SHAPE, random_batch

PEERS = ["ours", "ours+anomaly", "ours+health"]


def step_runner(mode, interval, out_dir):
    """One training step of the mode's kind; returns the loss."""
    import autograd as ag
    import nn
    from models.gpt.gpt2 import GPT, GPTConfig
    from models.training.health import Health

    ag.manual_seed(0)
    model = GPT(GPTConfig(**SHAPE))
    opt = nn.optim.AdamW(model.optimizer_groups(0.1), lr=2e-3, betas=(0.9, 0.99))
    ids, targets = random_batch(SHAPE["vocab_size"], BATCH, SHAPE["block_size"])
    x, y = ag.Tensor(ids), ag.Tensor(targets)
    health = Health(model, interval if mode == "ours+health" else 0, out_dir, max_norm=1.0)
    checking = ag.detect_anomaly() if mode == "ours+anomaly" else contextlib.nullcontext()
    it = 0

    def step():
        nonlocal it
        with checking:  # as models.train: forward and backward checked, the update not
            opt.zero_grad()
            _, loss = model(x, y)
            loss.backward()
        health.after_backward(it, ids)
        nn.optim.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        health.after_step(it)
        it += 1
        return loss.item()
    return step


def mean_seconds(step, steps, warmup=3):
    first = step()
    for _ in range(warmup - 1):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return first, (time.perf_counter() - start) / steps


def main(argv=None):
    parser = alone.parser("python -m benchmarks.anomaly", __doc__.splitlines()[0], PEERS, rounds=3)
    parser.add_argument("--steps", type=alone.COUNT, default=50, help="timed steps per process")
    parser.add_argument("--interval", type=int, default=50, help="the health report's interval")
    args = parser.parse_args(argv)
    if args.peer:
        with tempfile.TemporaryDirectory() as out_dir:
            first, seconds = mean_seconds(step_runner(args.peer, args.interval, Path(out_dir)), args.steps)
        alone.emit(args.peer, {"step_s": seconds, "first_loss": first})
        return
    print(f"the main job's training step (4 layers, 4 heads, 128 wide, batch {BATCH} x {SHAPE['block_size']}) "
          f"with each debugging mode; {args.threads} thread(s), {args.steps} timed steps per process, "
          f"health every {args.interval}")
    results = alone.run("benchmarks.anomaly", args, argv)
    medians = alone.report(results, "step_s", "time per step", "ms", scale=1e3, ours="off")
    for peer in PEERS[1:]:
        print(f"  {peer} / off: {medians[peer] / medians['ours']:.3f}x the time "
              f"({(medians[peer] / medians['ours'] - 1) * 100:+.1f} %)")
    print("  first-step loss: " + ", ".join(f"{peer} {rs[0]['first_loss']!r}" for peer, rs in results.items()))


if __name__ == "__main__":
    main()
