"""models.train as the MPI tests run it: `[mpiexec -n N] python -m tests.models.mpi_train [OPTIONS] TRAIN-ARGS`.

--float64 trains in float64, where runs that add the same numbers in another
order (2 ranks, a twice larger batch, gradient accumulation) agree to about
1e-15 instead of float32's 1e-7. --fail-rank R --fail-at I --fail-how HOW makes
rank R fail at iteration I: `step` raises a ValueError inside its forward and
backward pass, `reduce` raises a RuntimeError in the gradient all-reduce,
where no agreement between ranks catches it, `health` an OSError (a full
disk) as rank R appends its record to health.jsonl (give --health-interval),
and `anomaly` the log of 0 in its forward pass, which --detect-anomaly stops at.
"""
import errno
import sys

import autograd as ag
from models.training import health, train
from models.cli import Parser
from nn import distributed as dist


def main(argv=None):
    p = Parser("python -m tests.models.mpi_train", __doc__.splitlines()[0])
    p.add_argument("--float64", action="store_true")
    p.add_argument("--fail-rank", type=int, default=None)
    p.add_argument("--fail-at", type=int, default=0)
    p.add_argument("--fail-how", choices=["step", "reduce", "health", "anomaly"], default="step")
    options, train_argv = p.parse_known_args(argv)
    if options.float64:
        ag.set_default_dtype("float64")
    if options.fail_rank is not None:
        inject_failure(options)
    try:
        return train.main(train_argv)
    finally:
        ag.set_default_dtype("float32")


def inject_failure(options):
    calls = {"n": 0}

    def failing(real, fail):
        def run(*args):
            calls["n"] += 1
            if dist.rank == options.fail_rank and calls["n"] > options.fail_at:
                fail()
            return real(*args)
        return run

    def raising(error):
        def fail():
            raise error
        return fail

    if options.fail_how == "step":
        train.accumulate_gradients = failing(train.accumulate_gradients, raising(ValueError("injected failure")))
    elif options.fail_how == "anomaly":
        train.accumulate_gradients = failing(train.accumulate_gradients, lambda: ag.Tensor([0.0]).log())
    elif options.fail_how == "health":
        health.Health.after_step = failing(health.Health.after_step,
                                           raising(OSError(errno.ENOSPC, "No space left on device", "health.jsonl")))
    else:
        dist.all_reduce_gradients = failing(dist.all_reduce_gradients, raising(RuntimeError("injected failure")))


if __name__ == "__main__":
    sys.exit(main())
