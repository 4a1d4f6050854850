"""The main job's data parallelism, on nn.distributed: this rank's rows, what all ranks agree on, who speaks.

Each iteration draws one batch of batch_size x grad_accum x world_size rows
from one generator, alike on every rank, and rank r trains on rows
[r·B·K, (r+1)·B·K) of it, in K micro-batches of B rows. So N ranks consume
exactly the batches one process with N times the batch (or N times the
accumulation) would, and a run resumed on another number of ranks continues
the same stream whenever B·K·N is unchanged.

A rank that fails must not leave the others waiting in a collective. The work
between two collectives runs inside agree(), which ends in one collective of
failure flags: every rank learns of a failure at the same point and stops,
and exactly one of them, the first that failed, says why. The options, too,
are parsed on every rank and agreed on (parse_alike), since a file may be
missing on one machine only; rank 0 alone holds the checkpoint folder's lock.
Ctrl-C, which mpiexec passes to every rank, is agreed on the same way
(interrupts_agreed): a rank that stopped where the signal found it would leave
another waiting for ever in a collective it was already inside.
"""
import contextlib
import io
import os
import signal
import sys

import numpy as np

import autograd as ag
from nn import distributed as dist


class PeerFailed(Exception):
    """Another rank failed and says why; this rank stops without a word."""


_own_failure = None  # what this rank raised out of agree(): it alone reports that
_interrupted = False  # Ctrl-C came while interrupts_agreed() held it back for the next agree()


def batch_layout(args):
    """How an iteration's rows are made: batch_size x grad_accum micro-batch rows on each of `ranks`."""
    return {"batch_size": args.batch_size, "grad_accum": args.grad_accum, "ranks": dist.world_size}


def rows(layout):
    return layout["batch_size"] * layout["grad_accum"] * layout["ranks"]


def micro_batches(x, y, batch_size, grad_accum):
    """This rank's grad_accum slices of batch_size rows, from the whole iteration's (x, y)."""
    first = dist.rank * grad_accum * batch_size
    for k in range(grad_accum):
        part = slice(first + k * batch_size, first + (k + 1) * batch_size)
        yield x[part], y[part]


def agree(work):
    """work()'s result on every rank; if it raised on any rank, every rank raises.

    The first rank that failed raises its own exception, the others PeerFailed.
    If none failed but Ctrl-C reached any rank, every rank raises KeyboardInterrupt.
    """
    global _own_failure, _interrupted
    if dist.world_size == 1:
        return work()
    result, error = None, None
    try:
        result = work()
    except Exception as exc:  # whatever it is, the other ranks must hear of it before anyone stops
        error = exc
    flags = [0.0] * (dist.world_size + 1)  # one per rank, whether it failed; then whether any was interrupted
    flags[dist.rank] = float(error is not None)
    flags[-1] = float(_interrupted)
    *failures, interrupted = dist.all_reduce(flags)
    failed = [r for r, flag in enumerate(failures) if flag]
    if not failed:
        if interrupted:
            _interrupted = False  # delivered, on every rank at once
            raise KeyboardInterrupt
        return result
    if failed[0] == dist.rank:
        _own_failure = error
        raise error
    raise PeerFailed(f"rank {failed[0]} failed")


@contextlib.contextmanager
def interrupts_agreed():
    """Inside, in a job, Ctrl-C stops every rank together, at the next agree(), instead of where it finds each.

    Leave it (or call separate()) where the ranks go separate ways: there
    Ctrl-C interrupts at once again.
    """
    global _interrupted
    if dist.world_size == 1:
        yield
        return

    def note(signum, frame):
        global _interrupted
        _interrupted = True

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield
    except BaseException:
        signal.signal(signal.SIGINT, previous)
        _interrupted = False  # on its way out already: an interrupt held back is spent
        raise
    separate(previous)


def separate(handler=signal.default_int_handler):
    """From here on no rank waits for another: Ctrl-C interrupts at once, and one held back interrupts now.

    Ranks after 0 have nothing left to do then but wait at the exit for rank 0
    to finish: they ignore Ctrl-C, which rank 0 answers for all.
    """
    global _interrupted
    if dist.world_size == 1:
        return
    signal.signal(signal.SIGINT, handler if dist.rank == 0 else signal.SIG_IGN)
    if _interrupted:
        _interrupted = False
        raise KeyboardInterrupt


def on_root(work):
    """work() on rank 0 alone (writing files), every rank agreeing on whether it failed."""
    return agree(lambda: work() if dist.rank == 0 else None)


@contextlib.contextmanager
def held_on_root(context):
    """Rank 0 alone enters `context` (a context manager) for the block; every rank agrees on whether it could."""
    with contextlib.ExitStack() as stack:
        on_root(lambda: stack.enter_context(context))
        yield


def parse_alike(parse):
    """parse()'s options on every rank, or SystemExit on every rank when any rank's parser refused them.

    A parser prints its one line (or --help) and raises SystemExit. Rank 0
    speaks for all: where it refused, or printed help, every rank exits as it
    does, saying nothing more. Where rank 0 accepted what another refused (a
    --data file missing on that machine), the first that refused prints its
    line, naming itself, and every rank exits with its status. Without this,
    the ranks that accepted would wait for ever for the one that left.
    """
    if dist.world_size == 1:
        return parse()
    said, options, status = io.StringIO(), None, None
    try:
        if dist.rank == 0:
            options = parse()
        else:
            with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
                options = parse()
    except SystemExit as exc:
        status = exc.code if exc.code is not None else 0
    statuses = dist.all_gather(status)
    refused = [r for r, code in enumerate(statuses) if code is not None]
    if not refused:
        return options
    if refused[0] == dist.rank and dist.rank > 0:
        sys.stderr.write(said.getvalue().replace(": error: ", f": error: rank {dist.rank}: ", 1))
    raise SystemExit(statuses[refused[0]])


def mean_over_ranks(values):
    return [v / dist.world_size for v in dist.all_reduce(values)]


def error_prefix(error):
    """How this rank's line about `error` starts, or None when another rank reports it.

    What only this rank met it reports, naming itself; what every rank met
    alike, rank 0 reports.
    """
    if dist.world_size > 1 and error is _own_failure:
        return f"rank {dist.rank}: "
    return "" if dist.rank == 0 else None


@contextlib.contextmanager
def followers_quiet():
    """Inside, ranks other than 0 print nothing to stdout: rank 0 speaks for all."""
    with contextlib.ExitStack() as stack:
        if dist.rank > 0:
            devnull = stack.enter_context(open(os.devnull, "w"))
            stack.enter_context(contextlib.redirect_stdout(devnull))
        yield


def _rank_seed(seed, step):
    return int(np.random.SeedSequence([seed, step, dist.rank]).generate_state(1)[0])


def seed_followers(seed):
    """Ranks after 0 draw their dropout masks from streams of their own; rank 0 keeps the single process's."""
    if dist.rank > 0:
        ag.manual_seed(_rank_seed(seed, 0))


def rng_states():
    """The model generators' states for a checkpoint: rank 0's as model_rng, and in a job every rank's."""
    states = dist.all_gather(ag.get_rng_state())
    return {"model_rng": states[0], **({"model_rngs": states} if dist.world_size > 1 else {})}


def restore_rng(state, seed):
    """Each rank takes back its stream from the checkpoint; a rank it did not have starts a fresh one."""
    states = state.get("model_rngs", [state["model_rng"]])
    if dist.rank < len(states):
        ag.set_rng_state(states[dist.rank])
    else:
        ag.manual_seed(_rank_seed(seed, state["iter"]))


def describe(layout):
    ranks = layout["ranks"]
    return f"batch {layout['batch_size']} x grad-accum {layout['grad_accum']} x {ranks} rank{'s' * (ranks > 1)}"


def layout_change(saved, args):
    """How a resume changes the making of an iteration's rows, for resume's one line: (changes, remark).

    `changes` lists what no option says (the number of ranks), `remark` whether
    the rows per iteration, and so the batches, stay those of the checkpoint's
    run; ([], None) when nothing changed or the checkpoint did not record it.
    """
    now = batch_layout(args)
    if saved is None or saved == now:
        return [], None
    changes = [f"mpiexec -n {saved['ranks']} → {now['ranks']}"] if saved["ranks"] != now["ranks"] else []
    if rows(saved) == rows(now):
        return changes, f"still {rows(now)} rows per iteration ({describe(now)}), so the same batches"
    return changes, (f"{rows(now)} rows per iteration ({describe(now)}) instead of the checkpoint's {rows(saved)} "
                     f"({describe(saved)}): other batches and updates than the first run would have made")
