"""Where the main job's training step spends its time, op by op: ours and PyTorch's, each alone in its process.

Run from the repository root, with nothing else busy:

    python -m benchmarks.step_profile [--rounds 2] [--steps 60] [--top 14]

The step is benchmarks.train_step's. Ours: each op's forward and backward
(every autograd.Function), zero_grad, clipping and AdamW's step are timed
around their calls; "outside the ops" is the rest of the step, the engine's
own bookkeeping (recording the graph, the topological sort, summing
gradients). PyTorch: torch.profiler's self CPU time per aten op over the same
steps, "outside" the step less all of them. The two split the work
differently (our Linear is PyTorch's addmm, mm and sum), and timers cost time
of their own, so a profiled step is slower than train_step's: use this to find
where a gap is, train_step to size it. Each figure is the median over the
rounds of ms per step. Prints; asserts nothing.
"""
import statistics
import time

from benchmarks import alone
from benchmarks.train_step import BATCH, SHAPE, ours_runs, torch_runs

PEERS = ["ours", "torch"]
OUTSIDE = "outside the ops"


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


_inside = [False]  # a timed call is running: calls it makes (GetItem.backward_into → backward, a checkpoint's
# forward → its ops' forwards) are its own time, not counted twice


def _timed(totals, name, fn):
    def timed(*args, **kwargs):
        if _inside[0]:
            return fn(*args, **kwargs)
        _inside[0] = True
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + time.perf_counter() - start
            _inside[0] = False
    return timed


def ours_parts(steps):
    """(seconds per step, {part: seconds per step}) of our step, every op's forward and backward timed."""
    import autograd as ag
    import nn

    runs = ours_runs(SHAPE, BATCH, SHAPE["block_size"])
    totals = {}
    for op in _subclasses(ag.Function):
        for method in ("forward", "backward", "backward_into"):
            if op.__dict__.get(method) is not None:
                setattr(op, method, _timed(totals, f"{op.__name__}.{method}", op.__dict__[method]))
    for method in ("zero_grad", "step"):
        setattr(nn.optim.AdamW, method, _timed(totals, f"AdamW.{method}", getattr(nn.optim.AdamW, method)))
    nn.optim.clip_grad_norm_ = _timed(totals, "clip_grad_norm_", nn.optim.clip_grad_norm_)
    for _ in range(3):
        runs["step"]()
    totals.clear()
    start = time.perf_counter()
    for _ in range(steps):
        runs["step"]()
    return (time.perf_counter() - start) / steps, {name: t / steps for name, t in totals.items()}


def torch_parts(steps):
    """The same for PyTorch's step: torch.profiler's self CPU time of each aten op."""
    from torch.profiler import ProfilerActivity, profile

    runs = torch_runs(SHAPE, BATCH, SHAPE["block_size"])
    for _ in range(3):
        runs["step"]()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            runs["step"]()
        seconds = time.perf_counter() - start
    return seconds / steps, {e.key: e.self_cpu_time_total / 1e6 / steps for e in prof.key_averages()}


def main(argv=None):
    parser = alone.parser("python -m benchmarks.step_profile", __doc__.splitlines()[0], PEERS, rounds=2)
    parser.add_argument("--steps", type=alone.COUNT, default=60, help="profiled steps per process")
    parser.add_argument("--top", type=alone.COUNT, default=14, help="the parts printed per peer, largest first")
    args = parser.parse_args(argv)
    if args.peer:
        step_s, parts = (ours_parts if args.peer == "ours" else torch_parts)(args.steps)
        alone.emit(args.peer, {"step_s": step_s, "parts": {**parts, OUTSIDE: step_s - sum(parts.values())}})
        return
    print(f"where one training step of the main job's GPT goes, {args.threads} thread(s) per peer, "
          f"{args.steps} profiled steps per process; ms per step, the median over the rounds")
    results = alone.run("benchmarks.step_profile", args, argv)
    for peer, rounds in results.items():
        step = statistics.median(r["step_s"] for r in rounds) * 1e3
        names = {name for r in rounds for name in r["parts"]}
        parts = {name: statistics.median(r["parts"].get(name, 0.0) for r in rounds) * 1e3 for name in names}
        ranked = sorted(parts.items(), key=lambda kv: -kv[1])
        shown = ranked[:args.top] + ([(OUTSIDE, parts[OUTSIDE])] if OUTSIDE not in dict(ranked[:args.top]) else [])
        print(f"  {peer}: {step:.1f} ms a step, profiled")
        for name, ms in shown:
            print(f"    {name:<56}{ms:8.2f}")
        rest = sum(ms for name, ms in ranked if name not in dict(shown))
        print(f"    {'every other part':<56}{rest:8.2f}")


if __name__ == "__main__":
    main()
