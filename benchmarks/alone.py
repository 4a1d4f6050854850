"""Each peer alone in a fresh process, peers alternating over rounds: the harness of every cross-engine benchmark.

Two engines timed in one process distort each other: on a 2-core machine the
worker threads of one library keep spinning while the other runs. So a
benchmark script measures one peer per process: `python -m benchmarks.NAME
[options] --peer PEER` imports only that peer's library, measures, and prints
one JSON line. `run` starts that command for every peer, round after round,
in alternating order (A B, B A, A B, ...: drift in the machine's load hits
every peer alike); `report` prints each peer's median over the rounds, ours
against every other peer as a ratio, and the peak resident memory of each
peer's processes. In-process interleaving stays only for comparing two
variants of our own code.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from models.cli import Parser, device, interval

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


COUNT = interval(int, "[1, inf)")  # `type=` of a count of rounds, steps or repeats: a median needs one at least


def parser(prog, description, peers, rounds=3):
    """The options every benchmark shares; `--peer` (internal) makes this process measure one peer."""
    p = Parser(prog, description)
    p.add_argument("--rounds", type=COUNT, default=rounds, help="fresh processes per peer, in alternating order")
    p.add_argument("--threads", type=int, default=2, help="BLAS and OpenMP threads of every peer")
    p.add_argument("--peers", default=",".join(peers), help=f"the peers to run, comma-separated, from {peers}")
    p.add_argument("--peer", choices=peers, help=argparse.SUPPRESS)
    return p


def parse_args(parser, argv=None):
    """The options `parser` (a benchmark's, with --device) reads from argv. `--device cuda` with one of ours
    among the peers must find CuPy and a GPU in the harness, before any peer starts: a peer without them built its
    model, then ended in a traceback. The peers do not check again: PyTorch's neither need CuPy nor may load it
    (its memory would count as theirs)."""
    args = parser.parse_args(argv)
    if args.device == "cuda" and not args.peer and any(p.startswith("ours") for p in args.peers.split(",")):
        try:
            device("cuda")
        except argparse.ArgumentTypeError as exc:
            parser.error(f"argument --device: {exc}")
    return args


def threads():
    """The thread count `run` gave this peer process (torch.set_num_threads needs it; BLAS reads the variables)."""
    return int(os.environ.get("OMP_NUM_THREADS", "1"))


def peak_rss_mb():
    """This process's peak resident memory so far, in MB: its own address space's high-water mark.

    Linux's VmHWM, not getrusage's ru_maxrss: across exec the kernel keeps the larger of the parent's peak and
    the child's own in ru_maxrss, so every peer `run` starts would report at least the harness's memory (the
    child of a parent holding 426 MB read 426 MB, its own peak 11 MB). ru_maxrss only where /proc is missing.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2 ** 20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KB on Linux


def emit(peer, result):
    """Print a peer's result as the one JSON line `run` reads, with the process's peak resident memory.

    Refuses a result measured beside the other engine: our peers must not have
    loaded PyTorch, the others not our engine's kernels (numba, whose threads
    would spin beside PyTorch's). The autograd package itself runs nothing at
    import, and every peer imports it: the options' `type=` checks are
    models.cli's, whose interval rule is autograd.intervals.
    """
    other = "torch" if peer.startswith("ours") else "numba"
    if other in sys.modules:
        raise RuntimeError(f"peer {peer!r} loaded {other!r}: each peer must run alone in its process")
    print(json.dumps({**result, "peak_rss_mb": peak_rss_mb()}), flush=True)


def run(module, args, argv=None):
    """{peer: [one result per round]}, each from `python -m module ... --peer PEER` in a fresh process.

    `args` are the parsed shared options; `argv` the command line to pass on
    (this process's own by default). Each result also gets `process_s`, the
    wall time of the whole process, interpreter start and imports included.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    peers = args.peers.split(",")
    env = {**os.environ, **{name: str(args.threads) for name in THREAD_VARIABLES}}
    results = {peer: [] for peer in peers}
    for r in range(args.rounds):
        for peer in peers if r % 2 == 0 else peers[::-1]:
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", module, *argv, "--peer", peer], env=env,
                                  capture_output=True, text=True)
            elapsed = time.perf_counter() - start
            if proc.returncode != 0:
                sys.exit(f"{module}: peer {peer!r} failed (exit {proc.returncode}):\n{proc.stderr.strip()[-3000:]}")
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            results[peer].append({**result, "process_s": elapsed})
            print(f"  round {r + 1}/{args.rounds}: {peer} done in {elapsed:.1f} s", file=sys.stderr, flush=True)
    return results


def median(results, peer, key):
    return statistics.median(r[key] for r in results[peer])


def report(results, key, label, unit, scale=1.0, digits=1, higher_is_better=False, ours="ours", memory=True):
    """Print every peer's median of `key` (times `scale`, in `unit`), ours ÷ each other peer, and peak memory."""
    medians = {peer: median(results, peer, key) * scale for peer in results}
    rounds = len(next(iter(results.values())))
    print(f"{label} (median of {rounds} fresh process{'es' if rounds > 1 else ''} per peer)")
    for peer, value in medians.items():
        spread = ", ".join(f"{r[key] * scale:.{digits}f}" for r in results[peer])
        rss = f"   peak RSS {max(r['peak_rss_mb'] for r in results[peer]):7.1f} MB" if memory else ""
        print(f"  {peer:<14}{value:12.{digits}f} {unit:<10}(rounds: {spread}){rss}")
    if ours in medians:
        kind = "rate" if higher_is_better else "time"
        for peer, value in medians.items():
            if peer != ours:
                print(f"  ours / {peer}: {medians[ours] / value:.2f}x the {kind}")
    return medians


def verdict(ratio, target):
    """A target's judgment of a ratio, printed beside it: at most `target` times the reference meets it."""
    return f"≤ {target}×: {'met' if ratio <= target else 'NOT met'}"


def report_memory(results, ours="ours"):
    """Each peer's largest peak resident memory over its processes, and ours ÷ each other peer's."""
    peaks = {peer: max(r["peak_rss_mb"] for r in rs) for peer, rs in results.items()}
    for peer, mb in peaks.items():
        if peer != ours and ours in peaks:
            print(f"  peak RSS ours / {peer}: {peaks[ours]:.0f} MB / {mb:.0f} MB = {peaks[ours] / mb:.2f}x")
    return peaks
