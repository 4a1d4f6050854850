"""Data-parallel scaling of the main job: tokens/s on 1 and 2 MPI ranks, and the time spent communicating.

Run from the repository root, alone (needs the dist extra):  python -m benchmarks.scaling [--rounds R] [--max-iters N]

Each measurement is a fresh `python -m models.train` with the default model
(4 layers, 128 wide, batches of 12 per rank) for N iterations, evaluating
only at the start and the end, and reads the speed line it prints at the end:
tokens per second over the training steps (every rank's tokens), and for a
job the milliseconds per step spent in collectives (waiting for the slower
rank included). Three set-ups, alternated over R rounds, medians reported:
1 process with 1 BLAS thread, `mpiexec -n 2` with 1 thread per rank, and, for
comparison, 1 process with 2 threads. Prints; asserts nothing.
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import alone
from models.cli import Parser, interval

ROOT = Path(__file__).resolve().parents[1]
TARGET = 1.6
SETUPS = [("1 rank, 1 thread", 1, 1), ("2 ranks, 1 thread each", 2, 1), ("1 process, 2 threads", 1, 2)]
SPEED = re.compile(r"speed: ([\d,]+) tokens/s over \d+ iterations "
                   r"\(([\d.]+) ms each(?:, ([\d.]+) ms of it communicating)?")


def run(ranks, threads, max_iters, out_dir):
    """(tokens/s, ms per step, ms per step communicating) of one training run."""
    train = [sys.executable, "-m", "models.train", "--max-iters", str(max_iters), "--eval-interval",
             str(max_iters), "--eval-iters", "1", "--sample-tokens", "0", "--peak-tflops", "1", "--no-progress",
             "--out-dir", str(out_dir)]
    if ranks > 1:
        mpiexec = shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        if mpiexec is None:
            sys.exit("benchmarks.scaling: no mpiexec; install the dist extra: pip install -e \".[dist]\"")
        train = [mpiexec, "-n", str(ranks), *train]
    # every thread variable, as alone.run sets them: OpenBLAS reads OPENBLAS_NUM_THREADS before OMP_NUM_THREADS,
    # so one the caller exported would give "1 thread" set-ups its count (and each MPI rank as many)
    env = {**os.environ, **{name: str(threads) for name in alone.THREAD_VARIABLES}, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(train, cwd=ROOT, env=env, capture_output=True, text=True)
    match = SPEED.search(done.stdout)
    if done.returncode != 0 or match is None:
        sys.exit(f"benchmarks.scaling: {' '.join(train)} failed:\n{done.stderr[-2000:]}")
    tokens, ms, comm = match.groups()
    return float(tokens.replace(",", "")), float(ms), float(comm or 0.0)


def main(argv=None):
    p = Parser("python -m benchmarks.scaling", __doc__.splitlines()[0])
    p.add_argument("--rounds", type=alone.COUNT, default=3, help="runs of each set-up, the three in turn every round")
    p.add_argument("--max-iters", type=interval(int, "[2, inf)"), default=150,
                   help="training iterations per run (the first is not timed: 2 at least)")
    args = p.parse_args(argv)
    results = {name: [] for name, _, _ in SETUPS}
    with tempfile.TemporaryDirectory() as scratch:
        for r in range(args.rounds):
            for name, ranks, threads in SETUPS:
                results[name].append(run(ranks, threads, args.max_iters, Path(scratch) / f"{r}-{ranks}-{threads}"))
                print(f"round {r + 1}: {name}: {results[name][-1][0]:,.0f} tokens/s", file=sys.stderr)
    base = statistics.median(t for t, _, _ in results[SETUPS[0][0]])
    print(f"main job, default model, {args.max_iters} iterations, median of {args.rounds} rounds")
    print(f"{'set-up':<24} {'tokens/s':>10} {'ms/step':>8} {'comm ms/step':>13} {'speed-up':>9}")
    for name, ranks, _ in SETUPS:
        tokens = statistics.median(t for t, _, _ in results[name])
        ms = statistics.median(m for _, m, _ in results[name])
        comm = f"{statistics.median(c for _, _, c in results[name]):.1f}" if ranks > 1 else "-"
        print(f"{name:<24} {tokens:>10,.0f} {ms:>8.1f} {comm:>13} {tokens / base:>8.2f}x")
    print(f"target: 2 ranks at least {TARGET}x the tokens/s of 1 rank with 1 thread")


if __name__ == "__main__":
    main()
