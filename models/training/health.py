"""Is training healthy? Every N iterations, the checks people make by hand, as records, a picture and warnings.

    health = Health(model, interval=50, out_dir="out", max_norm=1.0, start=it0)  # it0: 0, or a resumed run's
    ... backward ...
    health.after_backward(it, x)      # gradients final, before clipping; x: the batch's token ids
    ... clip, optimizer.step() ...
    health.after_step(it)             # the update this step made
    health.close()                    # out/health.png

What a record (one line of out/health.jsonl) holds:
- per parameter: the gradient's norm, the weight's norm, the norm of the
  update this step made, ‖Δw‖, and log10 ‖Δw‖/‖w‖ (null where ‖Δw‖ or ‖w‖ is 0);
- per block (`Block`s of models/gpt/gpt2.py): the mean and std of its output
  (the residual stream), the fraction of GELU's inputs below −3 (GELU is
  flat there: those units pass almost no gradient), and each head's mean
  attention entropy in nats (a head near 0 looks at one key only);
- for the step: the global gradient norm and whether clipping scaled it.
A figure that is NaN or infinite is recorded as null (JSON has neither).

The activations come from one more forward pass on the iteration's first
`rows` rows, in eval mode (no dropout, so no random number is drawn) and
only on a health iteration, read from the graph it records: the ops know
their module (`op.scope`). The normal forward is untouched, and with
interval 0 nothing here runs at all. `RULES` are checked after each record;
a rule that holds at every record across `WINDOW` iterations (the first
`WINDOW` from iteration 0 for a rule about the start, any later ones for its
twin about the rest of the run) prints one warning naming the layer and the
likely cause (once per layer and rule).

A resumed run (`start` > 0) continues the report of the run it resumes: it
keeps the records of health.jsonl before `start` (those after it are of
iterations it makes again) and the warnings they gave, so it prints what the
uninterrupted run would have printed from `start` on, and its picture covers
the whole run.

In memory it keeps only the records the rules judge (`records`: the window),
as a long run at a short interval has too many to hold; the picture reads them
all back from health.jsonl (`history`), which holds each as it is recorded.

health.jsonl is written first with the run's first record, as a checkpoint
folder is replaced at the first save: a run refused, interrupted or with
nothing to record before then leaves the report the folder held as it was.
"""
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import autograd as ag
from autograd import backend
from autograd.ops import GELU
from models.gpt.gpt2 import Block
from models.training.checkpoint import HEALTH_FILES, is_finite_number
from models.io import atomic_path, write_figure

JSONL_FILE, PLOT_FILE = HEALTH_FILES  # checkpoint.save keeps them in the folder
WINDOW = 50  # iterations a rule must hold before it warns
GELU_DEAD = -3.0  # GELU's slope is below 0.012 in magnitude left of here


@dataclass(frozen=True)
class Rule:
    """A warning: `figure` of one layer (a weight matrix, or a block) beyond `limit` at every record of the window."""

    name: str
    applies: str  # "param" (weight matrices only) or "block"
    figure: object  # that layer's figures in a record -> a number, or None where it has none
    above: bool  # warn above the limit (else below)
    limit: float
    says: str  # the warning's figure, formatted with the last record's number
    cause: str
    source: str
    when: str = "always"  # judge every window; "start": the run's first window only; "later": every one after it
    unless: str = ""  # a rule whose warning for the layer already said why (GELU saturated: from the start)

    def holds(self, figures):
        x = self.figure(figures)
        return x is not None and (x > self.limit if self.above else x < self.limit)


def log10_update(figures):
    """A parameter's log10 ‖Δw‖/‖w‖ in a record; −inf where the step left it as it was (no gradient reached it, or
    the update is below float32's resolution beside the weight): the smallest update of all. None where it has
    none (a weight of 0 that moved, a NaN)."""
    return -math.inf if figures.get("update_norm") == 0 else figures["log10_update_ratio"]  # (older runs' lack it)


def lowest_entropy(figures):
    """A block's lowest head attention entropy in a record; None where no head has one (a NaN is recorded null)."""
    return min((h for h in figures.get("attention_entropy") or () if h is not None), default=None)


RULES = (
    Rule("update too large", "param", log10_update, True, -1.0, "update/weight 10^{:.1f}",
         "the learning rate is likely too high",
         "Karpathy, Building makemore part 3 (2022): ~10^-3 is healthy; the default run peaks near 10^-1.3"),
    Rule("update too small", "param", log10_update, False, -5.0, "update/weight 10^{:.1f}",
         "the learning rate is likely too low, or the layer gets no gradient",
         "Karpathy, Building makemore part 3 (2022): ~10^-3 is healthy, far below it the layer barely learns"),
    Rule("GELU saturated", "block", lambda b: b.get("gelu_below_-3"), True, 0.05, "{:.0%} of GELU inputs below -3",
         "the initialisation is likely too large: the pre-activations are too wide",
         "Karpathy, Building makemore part 3 (2022), on saturated tanh units at initialisation; GELU's slope is "
         "under 0.012 below -3 (Hendrycks and Gimpel 2016). GPT-2's init puts none there; a trained MLP has "
         "many (the default run: 9% by iteration 2000), so only the start says so; 'GELU near-dead' judges the "
         "rest", when="start"),
    Rule("attention collapsed", "block", lowest_entropy, False, 0.1,
         "lowest head attention entropy {:.3f} nats",
         "the initialisation (or the learning rate) is likely too large: the scores q·k are too wide",
         "Zhai et al. 2023, Stabilizing Transformer Training by Preventing Attention Entropy Collapse"),
    Rule("GELU near-dead", "block", lambda b: b.get("gelu_below_-3"), True, 0.05, "{:.0%} of GELU inputs below -3",
         "units sit where GELU is flat and barely learn: the learning rate may be too high, or the MLP has "
         "more units than the task uses",
         "as GELU saturated, after the start: training, not the initialisation, put the inputs there",
         when="later", unless="GELU saturated"),
    # AdamW's weight decay still moves a weight no gradient reaches (by lr·wd·w, 10^-4 of it on the main job), so
    # "update too small" misses it there; where nothing moves it, that rule has said so first. The limit is the
    # least positive float: a norm below it is 0
    Rule("no gradient", "param", lambda p: p.get("grad_norm"), False, math.ulp(0.0), "gradient 0",
         "no path from the loss reaches the layer (a .detach(), a branch the loss does not use) or its units died",
         "backpropagation itself: a weight whose gradient is 0 is not trained, whatever the learning rate",
         unless="update too small"),
)


def _norm(array):
    a = backend.to_host(array).astype(np.float64, copy=False).ravel()
    return math.sqrt(float(a @ a))


def _finite_or_none(x):
    return x if math.isfinite(x) else None


def _record(line, params, blocks, after):
    """The record on `line` of health.jsonl, if it is one of a run of this model (its trainable `params`, its
    `blocks`) at an iteration after `after`; else None (a damaged line, or another model's)."""
    try:
        record = json.loads(line)
        if (type(record["iter"]) is int and record["iter"] > after and isinstance(record["params"], dict)
                and set(record["params"]) == params and isinstance(record["blocks"], dict)
                and set(record["blocks"]) == blocks and _holds_what_is_read(record)):
            return record
    except (ValueError, TypeError, KeyError, RecursionError, OverflowError):
        pass  # not JSON, not an object, a field missing, a number beyond a float
    return None


def _holds_what_is_read(record):
    """Whether the figures that `warnings` and `plot` read of `record` are there and are figures (a string or an
    array in a figure's place would end the resumed run in a TypeError)."""
    entropies = [b.get("attention_entropy", []) for b in record["blocks"].values() if isinstance(b, dict)]
    return (_has_figures(record, ("grad_norm", "max_norm")) and type(record["clipped"]) is bool
            and all(_has_figures(p, ("grad_norm", "log10_update_ratio"), ("update_norm",))
                    for p in record["params"].values())
            and all(_has_figures(b, ("std", "gelu_below_-3")) for b in record["blocks"].values())
            and all(isinstance(heads, list) and all(map(_is_figure, heads)) for heads in entropies))


def _has_figures(obj, required, optional=()):
    """Whether `obj` is an object holding each of `required`, and those and any of `optional` it has are figures."""
    return (isinstance(obj, dict) and all(key in obj for key in required)
            and all(_is_figure(obj[key]) for key in (*required, *optional) if key in obj))


def _is_figure(value):
    """Whether `value` is a figure as a record holds it: a finite number, or null (NaN, infinite, or none)."""
    return value is None or is_finite_number(value)


def attention_entropy(q, k):
    """Each head's mean entropy (nats) of causal softmax(q kᵀ/√D) over batch and queries: (B, H, T, D) → (H,)."""
    q, k = (backend.to_host(a).astype(np.float64) for a in (q, k))
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    T = scores.shape[-1]
    scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    plogp = p * np.log(np.where(p > 0, p, 1))  # 0 log 0 = 0; a NaN stays NaN, not an entropy of 0
    return (-plogp.sum(axis=-1)).mean(axis=(0, 2))


def activations(model, idx):
    """{block name: {mean, std, gelu_below_-3, attention_entropy}} from one forward pass of `model` on `idx`."""
    blocks = [name for name, m in model.named_modules() if isinstance(m, Block)]
    training, checkpointed = model.training, model.transformer.checkpoint_blocks
    # only an op that needs a gradient is recorded: with frozen weights (a LoRA run's base, lower blocks kept as
    # they are) a block's attention, GELU or whole output would be missing from the graph read below
    frozen = [p for p in model.parameters() if not p.requires_grad]
    model.eval()
    model.transformer.checkpoint_blocks = False  # a checkpointed block records no ops of its own to read
    try:
        for p in frozen:
            p.requires_grad = True
        logits, _ = model(idx)
        order = ag.topological_order(logits)[::-1]  # forward order
    finally:
        for p in frozen:
            p.requires_grad = False
        model.train(training)
        model.transformer.checkpoint_blocks = checkpointed
    # null where a block's GELU was not recorded: a .detach() before it leaves it out of the graph, and a record
    # without the figure would not be read back as one (no picture, no resumed report)
    out = {name: {"gelu_below_-3": None} for name in blocks}
    for t in order:
        op = t.op
        if op is None:
            continue
        owner = next((b for b in blocks if op.scope == b or op.scope.startswith(b + ".")), None)
        if owner is None:
            continue
        if op.scope == owner:  # the block's own ops are its residual adds: the last is its output
            out[owner]["output"] = t.data
        elif isinstance(op, GELU):  # a subclass too: a GELU with its own backward is still a GELU
            x = backend.to_host(op.inputs[0].data)
            out[owner]["gelu_below_-3"] = float((x < GELU_DEAD).mean())
        elif op.name == "ScaledDotProductAttention":
            out[owner]["attention_entropy"] = [_finite_or_none(float(h)) for h in attention_entropy(
                op.inputs[0].data, op.inputs[1].data)]
    for figures in out.values():
        y = backend.to_host(figures.pop("output")).astype(np.float64)
        figures["mean"], figures["std"] = _finite_or_none(float(y.mean())), _finite_or_none(float(y.std()))
    return out


def due(interval, it):
    """Whether iteration `it` is recorded at `interval` (0: never); every rank asks alike (rank 0 alone records)."""
    return bool(interval) and it % interval == 0


class Health:
    """The health report of one run (see the module's docstring); interval 0 makes every method a no-op.

    `start`: the iteration this run starts at; a resumed run's (above 0) continues the report in `out_dir`.
    """

    def __init__(self, model, interval, out_dir, max_norm=0.0, rows=None, say=print, window=WINDOW, start=0):
        self.model, self.interval, self.max_norm, self.rows, self.say = model, interval, max_norm, rows, say
        out_dir = Path(out_dir)  # a str too, as the module's docstring passes "out"
        self.path = out_dir / JSONL_FILE if interval else None
        self.plot_path = out_dir / PLOT_FILE if interval else None
        self.records, self.pending, self.warned, self._before = [], None, set(), None
        self.matrices = {name for name, p in model.named_parameters() if p.ndim >= 2}  # what "param" rules judge
        # records spanning at least `window` iterations (at the interval 30: 0, 30 and 60, not 0 and 30)
        self.window_records = max(2, -(-window // interval) + 1) if interval else 0
        self._kept = []  # the lines of health.jsonl this run keeps, until its first record rewrites the file
        if interval:
            history, self._kept = self._read(start) if start else ([], [])
            for record in history:  # the warnings the resumed run gave: each layer and rule warns once per run
                self._remember(record)
                self.warnings()

    def _remember(self, record):
        """Keep `record` and the window before it: the rules judge no more."""
        self.records.append(record)
        del self.records[:-self.window_records]

    def _read(self, start):
        """The records of health.jsonl before iteration `start`, and their lines: the run this one resumes (with
        `start` inf, the whole report).

        Its records from `start` on are of iterations this run makes again (the
        checkpoint it resumes is older than they are), and a last line without
        its newline is an append that a crash cut short, from after the checkpoint.
        """
        records, lines = [], []
        if not self.path.is_file():
            return records, lines
        params = {name for name, p in self.model.named_parameters() if p.requires_grad}
        blocks = {name for name, m in self.model.named_modules() if isinstance(m, Block)}
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if not line.endswith("\n"):  # cut short by a crash
                    break
                record = _record(line, params, blocks, after=records[-1]["iter"] if records else -1)
                if record is None:
                    self.say(f"health: line {number} of {self.path} is not a record of this model's run: the report "
                             f"keeps the {len(records)} before it")
                    break
                if record["iter"] >= start:
                    break
                records.append(record)
                lines.append(line)
        return records, lines

    def due(self, it):
        return due(self.interval, it)

    def after_backward(self, it, idx):
        """Gradients (before clipping) and activations of iteration `it`, if it is due; `idx`: its token ids."""
        if not self.due(it):
            return
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        params = {n: {"grad_norm": _norm(p.grad) if p.grad is not None else 0.0,
                      "weight_norm": _finite_or_none(_norm(p.data))}
                  for n, p in named}
        total = math.sqrt(sum(f["grad_norm"] ** 2 for f in params.values()))
        # clip_grad_norm_'s own test: a NaN norm scales every gradient (to NaN)
        clipped = bool(self.max_norm) and not self.max_norm / (total + 1e-6) >= 1
        rows = idx[:self.rows] if self.rows else idx
        self.pending = {"iter": it, "grad_norm": _finite_or_none(total), "max_norm": self.max_norm,
                        "clipped": clipped, "params": params,
                        "blocks": activations(self.model, ag.Tensor(rows, device=named[0][1].device))}
        self._before = {n: p.data.copy() for n, p in named}

    def after_step(self, it):
        """The update this step made, the record written, the rules checked."""
        if self.pending is None:
            return
        record, self.pending = self.pending, None
        for name, p in self.model.named_parameters():
            if name in self._before:
                figures = record["params"][name]
                step, weight = _norm(p.data - self._before[name]), figures["weight_norm"]
                figures["update_norm"] = _finite_or_none(step)
                figures["log10_update_ratio"] = (_finite_or_none(math.log10(step / weight))
                                                 if step > 0 and weight else None)
        self._before = None
        for figures in record["params"].values():
            figures["grad_norm"] = _finite_or_none(figures["grad_norm"])
        self._remember(record)
        line = json.dumps(record) + "\n"
        if self._kept is None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)  # before the first checkpoint makes it
            with atomic_path(self.path) as tmp:  # a crash leaves the file as it was, or the kept lines whole
                tmp.write_text("".join(self._kept) + line, encoding="utf-8")
            self._kept = None
        for line in self.warnings():
            self.say(line)

    def warnings(self):
        """The lines of the rules that now hold across the window, each layer and rule once per run."""
        recent = self.records[-self.window_records:]
        if len(recent) < self.window_records:
            return []
        span = recent[-1]["iter"] - recent[0]["iter"]
        lines = []
        first = recent[0]["iter"] == 0  # the run's start (a run resumed without its history never sees it)
        for rule in RULES:
            if rule.when == "start" and not first or rule.when == "later" and first:
                continue
            kind = "params" if rule.applies == "param" else "blocks"
            for layer, figures in recent[-1][kind].items():
                if rule.applies == "param" and layer not in self.matrices or (rule.name, layer) in self.warned \
                        or (rule.unless, layer) in self.warned:
                    continue
                if all(rule.holds(r[kind][layer]) for r in recent):
                    self.warned.add((rule.name, layer))
                    x = rule.figure(figures)  # −inf: log10_update's update of 0
                    said = "update/weight 0 (the step changed no value)" if x == -math.inf else rule.says.format(x)
                    lines.append(f"health: {layer_name(layer)}: {said} for {span} iterations: {rule.cause}")
        return lines

    def history(self):
        """Every record of the report, the resumed run's before this one's: read back from health.jsonl."""
        if self._kept is not None:  # this run has recorded nothing yet: the file may hold iterations it makes again
            return [json.loads(line) for line in self._kept]
        return self._read(math.inf)[0]

    def close(self):
        """Draw out/health.png from the history (nothing when there is none)."""
        records = self.history()
        if records:
            plot(self.plot_path, records, self.matrices)
            self.say(f"wrote the health report to {self.path} and {self.plot_path}")


def descent_check(model, idx, targets, eps=1e-2):
    """Does the loss change along each weight matrix's gradient as that gradient says? {name: ratio}.

    For each parameter w with gradient g (from one backward on the batch), the
    central difference (L(w + εĝ) − L(w − εĝ)) / 2ε, ĝ = g/‖g‖, estimates the
    slope of the loss along ĝ, which is ‖g‖ when g is right: the ratio of the
    two is 1. A parameter whose gradient comes through a wrong VJP has a ratio
    far from 1 (about −1 for a sign error on its only path): where to look.
    gradcheck's idea, one direction per parameter, on the whole model; costs
    two forward passes per parameter, so it is a tool to call, not a record.
    """
    training = model.training
    model.eval()  # no dropout: every loss below sees the same network
    try:
        model.zero_grad()
        model(ag.Tensor(idx), ag.Tensor(targets))[1].backward()
        ratios = {}
        with ag.no_grad():
            for name, p in model.named_parameters():
                size = _norm(p.grad) if p.grad is not None else 0.0
                if p.ndim < 2 or size == 0:  # biases and LayerNorm gains sit beside a weight that says the same
                    continue
                original, step = p.data, p.grad * (eps / size)
                slopes = []
                for sign in (1, -1):
                    p.data = original + sign * step
                    slopes.append(model(ag.Tensor(idx), ag.Tensor(targets))[1].item())
                p.data = original
                ratios[name] = (slopes[0] - slopes[1]) / (2 * eps) / size
    finally:
        model.zero_grad()
        model.train(training)
    return ratios


def layer_name(name):
    """transformer.h.2.mlp.c_fc.weight → h.2.mlp.c_fc (the layer, as people say it)."""
    name = name.removeprefix("transformer.")
    return name.removesuffix(".weight")


def plot(path, records, matrices):
    """Six panels over iterations: update ratio (with the 10^-3 guide; an update of 0 on a line of its own below
    the rest), gradient norm (a gradient of 0 likewise), the global norm and clipping, each block's output std, GELU's near-dead fraction and
    the lowest head entropy. The weight panels draw the parameters named in `matrices` (what the rules judge)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    its = [r["iter"] for r in records]
    weights = [n for n in records[0]["params"] if n in matrices]  # those the rules judge: a LoRA run's adapters too
    blocks = list(records[0]["blocks"])
    colours = plt.get_cmap("viridis")(np.linspace(0, 0.9, max(1, len(blocks))))
    # A weight's line: its colour says which layer of a block it is (or wte, wpe), its dash which block, so
    # that two lines differ in one of the two wherever they cross.
    palette = plt.get_cmap("tab10").colors
    kinds = {}
    dashes = ["-", "--", ":", "-."]

    def style(name):
        block = next((i for i, b in enumerate(blocks) if name.startswith(b + ".")), None)
        kind = name.removeprefix(blocks[block] + ".") if block is not None else name
        colour = palette[kinds.setdefault(kind.removesuffix(".weight"), len(kinds)) % len(palette)]
        return {"color": colour, "linestyle": dashes[block % len(dashes)] if block is not None else "-",
                "linewidth": 1.6 if block is None else 1.1}

    def series(kind, name, key):
        return [np.nan if r[kind][name][key] is None else r[kind][name][key] for r in records]

    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5), dpi=100)
    ax = axes[0, 0]
    ratios = {n: [log10_update(r["params"][n]) for r in records] for n in weights}
    drawn = [x for xs in ratios.values() for x in xs if x is not None and x > -math.inf]
    floor = math.floor(min(drawn + [RULES[1].limit])) - 1  # log10 0 is −inf: drawn here, below every ratio
    for n in weights:
        ax.plot(its, [np.nan if x is None else max(x, floor) for x in ratios[n]], label=layer_name(n), **style(n))
    ax.axhline(-3, color="black", linewidth=1.5, linestyle="--", label="10^-3 guide")
    ax.axhline(RULES[0].limit, color="#d62728", linewidth=1, linestyle=":", label="warning")
    unchanged = any(x == -math.inf for xs in ratios.values() for x in xs)
    if unchanged or min(drawn, default=0) < RULES[1].limit:  # the low warning, where a line goes below it
        ax.axhline(RULES[1].limit, color="#d62728", linewidth=1, linestyle=":")
    if unchanged:
        ax.axhline(floor, color="grey", linewidth=4, alpha=0.3, label="no update (Δw = 0)")
        ticks = [t for t in ax.get_yticks() if floor < t <= ax.get_ylim()[1]]
        ax.set_yticks([*ticks, floor], [*ax.yaxis.get_major_formatter().format_ticks(ticks), "Δw = 0"])
    ax.set_title("update / weight, log10 ‖Δw‖/‖w‖")
    ax = axes[0, 1]
    norms = {n: series("params", n, "grad_norm") for n in weights}
    zero = min((x for xs in norms.values() for x in xs if x > 0), default=1.0) / 10  # log 0 is −∞: drawn here
    for n in weights:
        ax.plot(its, [zero if x == 0 else x for x in norms[n]], **style(n))
    ax.set_yscale("log")
    if any(x == 0 for xs in norms.values() for x in xs):  # a layer no gradient reached, or one that died
        ax.axhline(zero, color="grey", linewidth=4, alpha=0.3, label="gradient 0")
        ax.legend(fontsize=8)
    ax.set_title("gradient norm per weight (before clipping)")
    ax = axes[0, 2]
    ax.plot(its, [np.nan if r["grad_norm"] is None else r["grad_norm"] for r in records], color="black",
            label="global gradient norm")
    clipped = [r for r in records if r["clipped"]]
    if clipped:  # else the legend would name markers that are not there (a run without clipping, say)
        ax.plot([r["iter"] for r in clipped], [r["grad_norm"] for r in clipped], "o", color="#d62728",
                markersize=4, label="clipping scaled it")
    if records[-1]["max_norm"]:
        ax.axhline(records[-1]["max_norm"], color="#d62728", linewidth=1, linestyle=":", label="clipping norm")
    ax.set_yscale("log")
    ax.set_title("global gradient norm")
    ax.legend(fontsize=8)
    for ax, key, title in ((axes[1, 0], "std", "block output std (residual stream)"),
                           (axes[1, 1], "gelu_below_-3", "fraction of GELU inputs below -3 (near-dead)")):
        for i, b in enumerate(blocks):
            ax.plot(its, series("blocks", b, key), color=colours[i], label=layer_name(b))
        ax.set_title(title)
    axes[1, 1].axhline(RULES[2].limit, color="#d62728", linewidth=1, linestyle=":", label="warning")
    ax = axes[1, 2]
    for i, b in enumerate(blocks):
        lowest = [lowest_entropy(r["blocks"][b]) for r in records]
        ax.plot(its, [np.nan if x is None else x for x in lowest], color=colours[i],
                label=f"{layer_name(b)} (lowest head)")
    ax.axhline(RULES[3].limit, color="#d62728", linewidth=1, linestyle=":", label="collapse warning")
    ax.set_title("attention entropy, nats (lowest head per block)")
    for ax in axes.flat:
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
    axes[1, 0].legend(fontsize=8)
    axes[1, 2].legend(fontsize=8)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="center right", fontsize=8, frameon=False)
    fig.suptitle("Training health")
    fig.tight_layout(rect=(0, 0, 0.88, 0.96))
    write_figure(path, fig)
    plt.close(fig)
