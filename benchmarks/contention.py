"""The main job's training step beside other work: idle, beside a busy process, beside a second copy of itself.

Run from the repository root, with nothing else busy:

    python -m benchmarks.contention [--rounds 2] [--seconds 8] [--threads 2]

For each peer (ours, PyTorch), every process alone in its own fresh process as
in the other benchmarks, three conditions, one after the other:
- idle: the peer alone;
- busy: beside one CPU-bound process (a Python loop, started first);
- pair: two copies of the peer, started together.
Each process builds the main job's model (benchmarks/train_step.py's step:
forward, backward, clipping, AdamW), steps untimed until a start time shared
with its twin, then times every step until a shared end time, so a pair's
copies overlap for the whole window. Printed per peer: the median step of each
condition, its ratio to idle, and for the pair its worst stretch (the slowest
median of STRETCH consecutive steps of either copy) against idle. The targets:
beside a busy process ≤ 2.5× idle; beside a second copy ≤ 3× idle, and no
stretch above 6×; idle, ours ≤ 0.85× PyTorch's step. Prints; asserts nothing.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks import alone, train_step

PEERS = ["ours", "torch"]
CONDITIONS = ("idle", "busy", "pair")
STRETCH = 5  # steps
TARGETS = {"busy": 2.5, "pair": 3.0, "stretch": 6.0, "idle": 0.85}  # idle: ours against PyTorch's
START_AFTER = 8.0  # seconds from launch to the timed window: imports, the model, warm kernels, for both copies
SPIN = "while True: pass"


def measure(peer, begin_at, end_at):
    """This process's step times (seconds) between the wall-clock times begin_at and end_at."""
    runs = (train_step.ours_runs if peer == "ours" else train_step.torch_runs)(
        train_step.SHAPE, train_step.BATCH, train_step.SHAPE["block_size"])
    step = runs["step"]
    while time.time() < begin_at:  # warm, and waiting for the twin
        step()
    times = []
    while time.time() < end_at:
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def run_condition(peer, condition, args):
    """[step times of each copy] for one condition, from fresh processes."""
    env = {**os.environ, **{name: str(args.threads) for name in alone.THREAD_VARIABLES}}
    begin_at = time.time() + START_AFTER
    command = [sys.executable, "-m", "benchmarks.contention", "--peer", peer, "--window",
               f"{begin_at!r},{begin_at + args.seconds!r}"]
    spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if condition == "busy" else None
    try:
        copies = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for _ in range(2 if condition == "pair" else 1)]
        outputs = [copy.communicate() for copy in copies]
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    results = []
    for copy, (out, err) in zip(copies, outputs):
        if copy.returncode != 0:
            sys.exit(f"benchmarks.contention: peer {peer!r} ({condition}) failed (exit {copy.returncode}):\n"
                     f"{err.strip()[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1])["step_s"])
    return results


def worst_stretch(times):
    return max(statistics.median(times[i:i + STRETCH]) for i in range(max(1, len(times) - STRETCH + 1)))


def verdict(ratio, target):
    return f"≤ {target}×: {'met' if ratio <= target else 'NOT met'}"


def report(results):
    """Per peer: each condition's median step (over every round's steps), its ratio to idle, and the targets."""
    print(f"median step, ms (every step of every round), and against idle; a stretch is {STRETCH} steps in a row")
    for peer, by_condition in results.items():
        medians = {c: statistics.median(t for copies in by_condition[c] for times in copies for t in times)
                   for c in CONDITIONS}
        stretch = max(worst_stretch(times) for copies in by_condition["pair"] for times in copies)
        idle = medians["idle"]
        busy, pair, worst = medians["busy"] / idle, medians["pair"] / idle, stretch / idle
        print(f"  {peer:<6} idle {idle * 1e3:7.1f}   beside a busy process {medians['busy'] * 1e3:7.1f} ({busy:.2f}×, "
              f"{verdict(busy, TARGETS['busy'])})   beside a second copy {medians['pair'] * 1e3:7.1f} ({pair:.2f}×, "
              f"{verdict(pair, TARGETS['pair'])}), worst stretch {stretch * 1e3:.1f} ({worst:.2f}×, "
              f"{verdict(worst, TARGETS['stretch'])})")
    if "ours" in results and "torch" in results:
        idle = {peer: statistics.median(t for copies in results[peer]["idle"] for times in copies for t in times)
                for peer in ("ours", "torch")}
        ratio = idle["ours"] / idle["torch"]
        print(f"  idle, ours / torch: {ratio:.2f}× the time ({verdict(ratio, TARGETS['idle'])})")


def main(argv=None):
    parser = alone.parser("python -m benchmarks.contention", __doc__.splitlines()[0], PEERS, rounds=2)
    parser.add_argument("--seconds", type=float, default=8.0, help="the timed window of every process")
    parser.add_argument("--window", help=argparse.SUPPRESS)  # internal: a copy's begin_at,end_at
    args = parser.parse_args(argv)
    if args.peer:
        begin_at, end_at = (float(t) for t in args.window.split(","))
        alone.emit(args.peer, {"step_s": measure(args.peer, begin_at, end_at)})
        return
    peers = args.peers.split(",")
    print(f"the main job's training step (benchmarks.train_step's) idle, beside a busy process and beside a second "
          f"copy; {args.threads} thread(s) per process, {args.seconds:g} s timed per process, {args.rounds} rounds")
    results = {peer: {c: [] for c in CONDITIONS} for peer in peers}
    for r in range(args.rounds):
        for condition in CONDITIONS:
            for peer in peers if r % 2 == 0 else peers[::-1]:
                copies = run_condition(peer, condition, args)
                results[peer][condition].append(copies)
                steps = ", ".join(f"{statistics.median(t) * 1e3:.1f} ms over {len(t)} steps" for t in copies)
                print(f"  round {r + 1}/{args.rounds}: {peer} {condition}: {steps}", file=sys.stderr, flush=True)
    report(results)


if __name__ == "__main__":
    main()
