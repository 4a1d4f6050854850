"""A corpus bigger than this benchmark lets any process hold: prepare's speed and memory, and train's on the shards.

Run from the repository root:  python -m benchmarks.prepare [--mb 256] [--workers 1,2] [--rounds 3] [--tokenizer char]

It writes a corpus of --mb megabytes (files of 4 MB, lines of Tiny Shakespeare
drawn at random, seeded) into a temporary folder, then, each in a fresh
process: `python -m models.prepare` --rounds times per --workers count, the
counts alternating (MB/s, and the speed-up of the medians over the first
count), and `python -m models.train --data` on the
shards for --iters iterations (the seconds from the start of the process to
its first evaluation, which comes before the first step, and then the speed),
and the same training on Tiny Shakespeare's shards: the model's own share.
For each process it reports the peak resident memory of the largest of its
processes (prepare's workers included), beside the corpus's size. With
characters (the default) the model is the main job's, so train's memory shows
what the data costs; with --tokenizer gpt2 (the BPE's speed) its 50,257-wide
logits dominate train's memory. --steps prepare or train runs one half (train
reads --keep's shards of the last --workers count). Prints; asserts nothing.
Not part of the test suite: at 256 MB it takes minutes.
"""
import argparse
import json
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import alone
from models.cli import Parser, interval
from models.training.data import DEFAULT_CORPUS


def write_corpus(folder, megabytes, seed=0):
    """Files of 4 MB of Tiny Shakespeare's lines in a seeded random order, `megabytes` in all."""
    lines = DEFAULT_CORPUS.read_text(encoding="utf-8").splitlines(keepends=True)
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    written, index = 0, 0
    while written < megabytes * 1e6:
        text = "".join(rng.choices(lines, k=110_000))[:4_000_000]
        (folder / f"part{index:04d}.txt").write_text(text, encoding="utf-8")
        written += len(text.encode("utf-8"))
        index += 1
    return written


def measured(command):
    """Run `command` in a fresh process: its output lines with the seconds at which each came, its wall time,
    and the peak RSS in MB of the largest process it ran (itself or any process it waited for)."""
    probe = [sys.executable, "-m", "benchmarks.prepare", "--measure", json.dumps(command)]
    proc = subprocess.run(probe, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"benchmarks.prepare: {' '.join(command)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def measure(command):
    """The --measure side of `measured`: runs in a process of its own, so that RUSAGE_CHILDREN is this command's."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [(time.perf_counter() - start, line.rstrip("\n")) for line in proc.stdout]
    if proc.wait() != 0:
        print("\n".join(line for _, line in lines[-30:]), file=sys.stderr)
        sys.exit(proc.returncode)
    print(json.dumps({"seconds": time.perf_counter() - start, "lines": lines,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))


def main(argv=None):
    p = Parser("python -m benchmarks.prepare", __doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=256, help="corpus size in MB")
    p.add_argument("--workers", default="1,2", help="the --workers counts to prepare with, comma-separated")
    p.add_argument("--rounds", type=alone.COUNT, default=1, help="prepares per --workers count, the counts alternating")
    p.add_argument("--tokenizer", choices=["char", "gpt2"], default="char",
                   help="characters (the main job's model) or GPT-2's byte-level BPE")
    p.add_argument("--steps", default="prepare,train", help="prepare, train, or both")
    p.add_argument("--iters", type=interval(int, "[2, inf)"), default=50, help="training iterations on the prepared shards")
    p.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it (default: a temporary one)")
    p.add_argument("--measure", help=argparse.SUPPRESS)  # internal: the fresh process that runs one command
    args = p.parse_args(argv)
    if args.measure:
        return measure(json.loads(args.measure))
    work = args.keep or Path(tempfile.mkdtemp(prefix="gptgrad-prepare-"))
    try:
        corpus = work / "corpus"
        start = time.perf_counter()
        size = write_corpus(corpus, args.mb) if not corpus.exists() else sum(
            f.stat().st_size for f in corpus.iterdir())
        print(f"corpus: {size / 1e6:,.0f} MB in {len(list(corpus.iterdir()))} files ({time.perf_counter() - start:.0f} s "
              f"to write); tokenizer {args.tokenizer}")
        counts = list(map(int, args.workers.split(",")))
        out = work / f"shards-{counts[-1]}"
        seconds = {workers: [] for workers in counts}
        for round_ in range(args.rounds if "prepare" in args.steps else 0):
            for workers in counts:
                out = work / f"shards-{workers}"
                shutil.rmtree(out, ignore_errors=True)
                run = measured([sys.executable, "-m", "models.prepare", str(corpus), "--out", str(out),
                                "--tokenizer", args.tokenizer, "--workers", str(workers), "--no-progress"])
                seconds[workers].append(run["seconds"])
                print(f"round {round_ + 1}, prepare --workers {workers}: {run['seconds']:.1f} s, "
                      f"{size / 1e6 / run['seconds']:.2f} MB/s, peak RSS {run['peak_rss_mb']:.0f} MB "
                      f"({run['peak_rss_mb'] / (size / 1e6):.1%} of the corpus)")
                print("  " + run["lines"][-1][1])
        if "prepare" in args.steps:
            base = statistics.median(seconds[counts[0]])
            for workers in counts:
                median = statistics.median(seconds[workers])
                print(f"prepare --workers {workers}: median {median:.1f} s over {args.rounds} rounds "
                      f"({min(seconds[workers]):.1f}–{max(seconds[workers]):.1f}), {size / 1e6 / median:.2f} MB/s, "
                      f"{base / median:.2f}x --workers {counts[0]}")
        if "train" not in args.steps:
            return
        small = work / "shards-shakespeare"  # the same training on 1 MB: what the model costs alone
        if not (small / "meta.json").is_file():
            subprocess.run([sys.executable, "-m", "models.prepare", str(DEFAULT_CORPUS), "--out", str(small),
                            "--tokenizer", args.tokenizer, "--no-progress"], check=True, capture_output=True)
        for data, what in ((out, f"{size / 1e6:,.0f} MB"), (small, "Tiny Shakespeare, 1 MB")):
            shutil.rmtree(work / "run", ignore_errors=True)
            run = measured([sys.executable, "-m", "models.train", "--data", str(data), "--out-dir", str(work / "run"),
                            "--max-iters", str(args.iters), "--eval-interval", str(args.iters), "--eval-iters", "5",
                            "--no-progress", "--sample-tokens", "0", "--peak-tflops", "1"])
            first_eval = next(t for t, line in run["lines"] if line.startswith("iter "))
            speed = next((line for _, line in run["lines"] if line.startswith("speed:")), "")
            print(f"train --data on {what} (the main job's model, {args.iters} iterations): first evaluation after "
                  f"{first_eval:.1f} s, whole run {run['seconds']:.1f} s, peak RSS {run['peak_rss_mb']:.0f} MB"
                  f"\n  {speed}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
