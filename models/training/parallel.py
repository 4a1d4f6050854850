"""The main job's ranks as one `World`: what every rank does alike, what they agree on, and who speaks.

Alone (no mpiexec, or -n 1) every method is the plain thing: `together()` runs
its block, `mean` returns its values. In a job of several ranks:

- A rank that fails must not leave the others waiting in a collective. The work
  between two collectives runs inside `with world.together():`, whose end is one
  collective of failure flags: every rank learns of a failure at the same point
  and stops, and exactly one of them, the first that failed, says why.
- The options are parsed on every rank and agreed on (`parse`), since a file may
  be missing on one machine only.
- Ctrl-C, which mpiexec passes to every rank, is agreed on the same way
  (`interrupts_agreed`): a rank that stopped where the signal found it would leave
  another waiting for ever in a collective it was already inside.
- The ranks must run alike: the same options, data, model and run state
  (`agree`). A difference would hang the job (ranks that disagree on how long
  to run wait for each other in different collectives) or let the replicas
  drift apart in silence, so every rank stops, with one line naming it.
- Rank 0 speaks for all (`followers_quiet`), writes the checkpoint and holds the
  folder's lock (`on_root`, `held_on_root`).
"""
import contextlib
import io
import os
import signal
import sys
import zlib

from nn import distributed as dist


class PeerFailed(Exception):
    """Another rank failed and says why; this rank stops without a word."""


class Disagreement(ValueError):
    """The ranks do not run alike (World.agree); every rank raises it at once."""


class World:
    """This process's place in the job, and the agreement protocol between the ranks (see the module's docstring)."""

    def __init__(self):
        self.rank, self.size = dist.rank, dist.world_size
        self.is_root = self.rank == 0
        self.own_failure = None  # what this rank raised out of together(): it alone reports that
        self.interrupted = False  # Ctrl-C came while interrupts_agreed() held it back for the next together()

    @contextlib.contextmanager
    def together(self):
        """The block runs on every rank; if it raised on any rank, every rank raises at the block's end.

        The first rank that failed raises its own exception, the others PeerFailed; where every rank failed
        with the same message (a damaged checkpoint they all read), that is no one rank's failure (error_prefix).
        If none failed but Ctrl-C reached any rank, every rank raises KeyboardInterrupt.
        """
        if self.size == 1:
            yield
            return
        error = None
        try:
            yield
        except Exception as exc:  # whatever it is, the other ranks must hear of it before anyone stops
            error = exc
        # one per rank, whether it failed and how (0, or its message's CRC-32 + 1, exact in float64; a file name
        # that is not UTF-8 may be in it), then whether any was interrupted
        flags = [0.0] * (self.size + 1)
        flags[self.rank] = zlib.crc32(str(error).encode(errors="backslashreplace")) + 1.0 if error is not None else 0.0
        flags[-1] = float(self.interrupted)
        *failures, interrupted = dist.all_reduce(flags)
        failed = [r for r, flag in enumerate(failures) if flag]
        if not failed:
            if interrupted:
                self.interrupted = False  # delivered, on every rank at once
                raise KeyboardInterrupt
            return
        if failed[0] == self.rank:
            alike = len(set(failures)) == 1  # every rank failed with the same message: no rank's own news
            self.own_failure = None if alike else error
            raise error
        raise PeerFailed(f"rank {failed[0]} failed")

    def on_root(self, work, *args):
        """work(*args) on rank 0 alone (writing files), every rank agreeing on whether it failed."""
        with self.together():
            if self.is_root:
                work(*args)

    @contextlib.contextmanager
    def held_on_root(self, context):
        """Rank 0 alone enters `context` (a context manager) for the block; every rank agrees on whether it could."""
        with contextlib.ExitStack() as stack:
            self.on_root(stack.enter_context, context)
            yield

    def sum(self, values):
        """Each of `values` (floats) summed over the ranks."""
        return dist.all_reduce(values)

    def mean(self, values):
        """Each of `values` (floats) averaged over the ranks."""
        return [v / self.size for v in self.sum(values)]

    @property
    def comm_seconds(self):
        """Seconds this rank has spent in collectives so far."""
        return dist.comm_seconds

    def gather(self, value):
        """Every rank's `value`, in rank order."""
        return dist.all_gather(value)

    def agree(self, facts):
        """Every rank's `facts` (name → a value with a readable str) are the same, or every rank raises one ValueError
        (`Disagreement`) naming the first fact that differs and each rank's value (rank 0 reports it)."""
        if self.size == 1:
            return
        everyone = self.gather(facts)
        names = list(dict.fromkeys(name for ranks_facts in everyone for name in ranks_facts))
        for name in names:
            values = [ranks_facts.get(name, "nothing") for ranks_facts in everyone]
            if any(value != values[0] for value in values):
                groups = {}
                for rank, value in enumerate(values):
                    groups.setdefault(repr(value), (value, []))[1].append(rank)
                said = ", ".join(f"rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks))} "
                                 f"{'have' if len(ranks) > 1 else 'has'} {value}" for value, ranks in groups.values())
                raise Disagreement(f"ranks disagree on {name}: {said}")

    def all_reduce_gradients(self, model):
        dist.all_reduce_gradients(model)

    def broadcast_parameters(self, model):
        dist.broadcast_parameters(model)

    def parse(self, parse, argv):
        """parse(argv)'s options on every rank, or SystemExit on every rank when any rank's parser refused them.

        A parser prints its one line (or --help) and raises SystemExit. Rank 0
        speaks for all: where it refused, or printed help, every rank exits as it
        does, saying nothing more. Where rank 0 accepted what another refused (a
        --data file missing on that machine), the first that refused prints its
        line, naming itself, and every rank exits with its status. Without this,
        the ranks that accepted would wait for ever for the one that left.
        """
        if self.size == 1:
            return parse(argv)
        said, options, status = io.StringIO(), None, None
        try:
            if self.is_root:
                options = parse(argv)
            else:
                with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
                    options = parse(argv)
        except SystemExit as exc:
            status = exc.code if exc.code is not None else 0
        statuses = self.gather(status)
        refused = [r for r, code in enumerate(statuses) if code is not None]
        if not refused:
            return options
        if refused[0] == self.rank and not self.is_root:
            sys.stderr.write(said.getvalue().replace(": error: ", f": error: rank {self.rank}: ", 1))
        raise SystemExit(statuses[refused[0]])

    def error_prefix(self, error):
        """How this rank's line about `error` starts, or None when another rank reports it.

        What only this rank met it reports, naming itself; what every rank met
        alike, rank 0 reports.
        """
        if self.size > 1 and error is self.own_failure:
            return f"rank {self.rank}: "
        return "" if self.is_root else None

    @contextlib.contextmanager
    def followers_quiet(self):
        """Inside, ranks other than 0 print nothing to stdout: rank 0 speaks for all."""
        with contextlib.ExitStack() as stack:
            if not self.is_root:
                devnull = stack.enter_context(open(os.devnull, "w"))
                stack.enter_context(contextlib.redirect_stdout(devnull))
            yield

    @contextlib.contextmanager
    def interrupts_agreed(self):
        """Inside, in a job, Ctrl-C stops every rank together, at the next together(), instead of where it finds each.

        Leave it (or call separate()) where the ranks go separate ways: there
        Ctrl-C interrupts at once again.
        """
        if self.size == 1:
            yield
            return

        def note(signum, frame):
            self.interrupted = True

        previous = signal.signal(signal.SIGINT, note)
        try:
            yield
        except BaseException:
            signal.signal(signal.SIGINT, previous)
            self.interrupted = False  # on its way out already: an interrupt held back is spent
            raise
        self.separate(previous)

    def separate(self, handler=signal.default_int_handler):
        """From here on no rank waits for another: Ctrl-C interrupts at once, and one held back interrupts now.

        Ranks after 0 have nothing left to do then but wait at the exit for rank 0
        to finish: they ignore Ctrl-C, which rank 0 answers for all.
        """
        if self.size == 1:
            return
        signal.signal(signal.SIGINT, handler if self.is_root else signal.SIG_IGN)
        if self.interrupted:
            self.interrupted = False
            raise KeyboardInterrupt
