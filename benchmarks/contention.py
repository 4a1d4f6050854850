"""The main job's training step beside other work: idle, beside a busy process, beside a second copy of itself.

Run from the repository root, with nothing else busy:

    python -m benchmarks.contention [--rounds 2] [--seconds 8] [--threads 2]

Every peer (ours, PyTorch) runs in fresh processes of its own, as in the other
benchmarks, in three conditions, one after the other:
- idle: one process per peer, started together, taking turns: in a turn of
  TURN seconds one peer steps and the others sleep. A shared host can have
  stretches of seconds to tens of seconds in which every step of every process
  is about 1.3x slower (docs/performance.md, 2026-12-04); turns a second long
  see both peers through the same stretches, where 8 s windows one after the
  other let a stretch land on one peer's window alone and decide the ratio;
- busy: each peer beside one CPU-bound process (a Python loop, started first);
- pair: two copies of the peer, started together.
Each process builds the main job's model (benchmarks/train_step.py's step:
forward, backward, clipping, AdamW), steps untimed until a start time shared
with its twin, then times every step until a shared end time, so a pair's
copies overlap for the whole window. Printed per peer: the median step of each
condition (for the pair, each round's slower copy's, their median), its ratio
to idle, and for the pair its worst stretch (the slowest STRETCH consecutive
steps of either copy, their mean step) against idle; then ours against PyTorch
idle, each round's ratio of the two peers' medians and their median. The
targets: beside a busy process ≤ 2.5× idle; beside a second copy each copy's
median ≤ 3× idle, and no stretch above 6×; idle, ours ≤ 0.85× PyTorch's step. Prints;
asserts nothing.
"""
import argparse
import json
import math
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
TURN = 1.0  # seconds: a peer's turn in the idle condition
GAP = 0.2  # seconds at the start of a turn without a step: the last peer's pools stop spinning (OpenBLAS's threads
# spin for up to 2^28 cycles after their last work, about 0.1 s)


def timed(step):
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def take_turns(step, begin_at, end_at, index, count, turn=TURN, gap=GAP):
    """step's times (seconds) in turn `index` of every `count`, each `turn` seconds long from begin_at to end_at,
    asleep between: a turn starts `gap` seconds in, its first step (after the sleep) untimed, and a step starts
    only while the one before would fit again before the turn ends."""
    times = []
    for k in range(index, int((end_at - begin_at) // turn), count):
        turn_end = begin_at + (k + 1) * turn
        time.sleep(max(0.0, begin_at + k * turn + gap - time.time()))
        last = timed(step)
        while time.time() + last < turn_end:
            last = timed(step)
            times.append(last)
    return times


def measure(peer, begin_at, end_at, turn=(0, 1)):
    """This process's step times (seconds) between the wall-clock times begin_at and end_at; with turn=(i, n),
    in its turns only (take_turns)."""
    runs = (train_step.ours_runs if peer == "ours" else train_step.torch_runs)(
        train_step.SHAPE, train_step.BATCH, train_step.SHAPE["block_size"])
    step = runs["step"]
    while time.time() < begin_at:  # warm, and waiting for the twin
        step()
    index, count = turn
    if count > 1:  # the first turn is nobody's: the other peer's last warm-up step may run past begin_at
        return take_turns(step, begin_at + TURN, end_at, index, count)
    times = []
    while time.time() < end_at:
        times.append(timed(step))
    return times


def idle_window(seconds, peers):
    """The idle condition's window: a turn for nobody, then as many turns for each of `peers` as let each step for
    `seconds` in all (its turns less their gaps). A whole number each: 2 s for 2 peers was 5 turns, 3 for the
    first peer and 2 for the other."""
    return TURN + math.ceil(seconds / (TURN - GAP)) * peers * TURN


def run_processes(peers, condition, args):
    """[(peer, step times)] of one process per entry of peers, started together, for one condition.

    Idle, the processes take turns over a window of `args.seconds` per peer;
    otherwise every process times the whole `args.seconds`.
    """
    env = {**os.environ, **{name: str(args.threads) for name in alone.THREAD_VARIABLES}}
    begin_at = time.time() + START_AFTER
    turns = len(peers) if condition == "idle" else 1
    window = args.seconds if turns == 1 else idle_window(args.seconds, turns)
    end_at = begin_at + window
    spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if condition == "busy" else None
    try:
        processes = [subprocess.Popen(
            [sys.executable, "-m", "benchmarks.contention", "--peer", peer, "--window", f"{begin_at!r},{end_at!r}",
             "--turn", f"{i % turns},{turns}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i, peer in enumerate(peers)]
        outputs = [process.communicate() for process in processes]
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    results = []
    for peer, process, (out, err) in zip(peers, processes, outputs):
        if process.returncode != 0:
            sys.exit(f"benchmarks.contention: peer {peer!r} ({condition}) failed (exit {process.returncode}):\n"
                     f"{err.strip()[-3000:]}")
        times = json.loads(out.strip().splitlines()[-1])["step_s"]
        if not times:
            sys.exit(f"benchmarks.contention: peer {peer!r} ({condition}) timed no step: its start-up outlasted the "
                     f"{START_AFTER:g} s before the window, or a step the window of {window:g} s; give --seconds more")
        results.append((peer, times))
    return results


def worst_stretch(times):
    """The slowest STRETCH steps in a row, as their mean step: the stretch's time over its steps. Their median
    would pass a stretch in which two of the five steps stalled for seconds (any stall of one or two steps in
    every five), which is what the target bounds."""
    n = min(STRETCH, len(times))
    return max(sum(times[i:i + n]) / n for i in range(len(times) - n + 1))


def report(results):
    """Per peer: idle's and busy's median step (over every round's steps), the pair's slower copy's median (over
    the rounds, each round's slower copy's), each against idle, and the targets. The pair's copies are not pooled:
    in the same window a starved copy takes fewer steps than its twin, so a median over both copies' steps is the
    faster copy's (one copy at 4× idle over 10 steps beside its twin's 60 at 1× read 1×, the target met)."""
    print("median step, ms (every step of every round; beside a second copy, the median of each round's slower "
          f"copy's), and against idle; a stretch is {STRETCH} steps in a row")
    for peer, by_condition in results.items():
        medians = {c: statistics.median(t for copies in by_condition[c] for times in copies for t in times)
                   for c in ("idle", "busy")}
        medians["pair"] = statistics.median(max(statistics.median(times) for times in copies)
                                            for copies in by_condition["pair"])  # each round's slower copy
        stretch = max(worst_stretch(times) for copies in by_condition["pair"] for times in copies)
        idle = medians["idle"]
        busy, pair, worst = medians["busy"] / idle, medians["pair"] / idle, stretch / idle
        print(f"  {peer:<6} idle {idle * 1e3:7.1f}   beside a busy process {medians['busy'] * 1e3:7.1f} ({busy:.2f}×, "
              f"{alone.verdict(busy, TARGETS['busy'])})   beside a second copy {medians['pair'] * 1e3:7.1f} "
              f"({pair:.2f}×, {alone.verdict(pair, TARGETS['pair'])}), worst stretch {stretch * 1e3:.1f} ({worst:.2f}×, "
              f"{alone.verdict(worst, TARGETS['stretch'])})")
    if "ours" in results and "torch" in results:
        # each round's two idle processes took turns, so its ratio compares them under the same host; pooled over
        # the rounds, a fast round's and a slow round's steps mix into medians that compare nothing
        ratios = [statistics.median(ours[0]) / statistics.median(torch[0])
                  for ours, torch in zip(results["ours"]["idle"], results["torch"]["idle"])]
        ratio = statistics.median(ratios)
        print(f"  idle, ours / torch: {ratio:.2f}× the time, the median of the rounds' "
              f"{', '.join(f'{r:.2f}' for r in ratios)} ({alone.verdict(ratio, TARGETS['idle'])})")


def main(argv=None):
    parser = alone.parser("python -m benchmarks.contention", __doc__.splitlines()[0], PEERS, rounds=2)
    parser.add_argument("--seconds", type=float, default=8.0, help="the timed window of every process")
    parser.add_argument("--window", help=argparse.SUPPRESS)  # internal: a copy's begin_at,end_at
    parser.add_argument("--turn", default="0,1", help=argparse.SUPPRESS)  # internal: its turn i of n
    args = parser.parse_args(argv)
    if args.peer:
        begin_at, end_at = (float(t) for t in args.window.split(","))
        turn = tuple(int(t) for t in args.turn.split(","))
        alone.emit(args.peer, {"step_s": measure(args.peer, begin_at, end_at, turn)})
        return
    peers = args.peers.split(",")
    print(f"the main job's training step (benchmarks.train_step's) idle (the peers taking turns of {TURN:g} s), beside a "
          f"busy process and beside a second copy; {args.threads} thread(s) per process, {args.seconds:g} s timed per "
          f"process, {args.rounds} rounds")
    results = {peer: {c: [] for c in CONDITIONS} for peer in peers}
    for r in range(args.rounds):
        order = peers if r % 2 == 0 else peers[::-1]
        for condition in CONDITIONS:
            groups = [order] if condition == "idle" else [[peer] * (2 if condition == "pair" else 1) for peer in order]
            for group in groups:
                copies = run_processes(group, condition, args)
                for peer in dict.fromkeys(group):
                    times = [t for p, t in copies if p == peer]
                    results[peer][condition].append(times)
                    steps = ", ".join(f"{statistics.median(t) * 1e3:.1f} ms over {len(t)} steps" for t in times)
                    print(f"  round {r + 1}/{args.rounds}: {peer} {condition}: {steps}", file=sys.stderr, flush=True)
    report(results)


if __name__ == "__main__":
    main()
