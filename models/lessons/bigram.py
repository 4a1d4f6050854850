"""Lesson 1's bigram model, trained by the engine: logits = E[current] @ W_U, one SGD step per batch.

What this file promises:

* The lesson's exact set-up: its 37-character corpus, the vocabulary of distinct
  characters in order of first appearance (V = 15), the 36 (current, next) pairs,
  E ∈ ℝ^{V×d} ~ N(0, 1) then W_U ∈ ℝ^{d×V} ~ N(0, 0.1²) from
  `np.random.default_rng(0)`, float64, full-batch `nn.optim.SGD` with lr 1.0 on
  the mean cross-entropy. Its losses: 2.7320 at step 0, 0.6808 at step 100,
  0.6557 at step 500, against the counting lower bound 0.6530 (the conditional
  entropy of the next character given the current one) and ln V = 2.70805.
* `Bigram`, an `nn.Module` whose parameters are named as in the lesson (`E`, `W_U`).
* `demo_loss()`: the step-0 loss of that set-up, with named tensors, for `viz`.

`python -m models.bigram [--dim 8] [--lr 1.0] [--steps 500] [--seed 0]` trains it
and prints, under lesson 000's section headings, the loss every 100 steps beside
the lesson's figures, the bound, and what it learned after 吃 beside the counts.
"""
import math
import sys

import numpy as np

import autograd as ag
import nn
from models.cli import SEEDS, Parser, counted, interval, within_memory
from models.numbers import fixed, section

CORPUS = "我吃苹果。你吃米饭。我喝水。他吃苹果。苹果很甜。米饭很香。我爱你。他喝水。"
LESSON_LOSSES = {0: 2.7320, 100: 0.6808, 500: 0.6557}  # the losses lesson 000 prints for d = 8, lr 1.0, seed 0
# E and W_U, their gradients, E[cur] for the 36 pairs and its gradient, and backward's temporaries: about 190 float64
# numbers for each unit of d (ru_maxrss: 1,470 to 1,600 bytes, d = 10⁶ to 3·10⁶), whatever the number of steps.
BYTES_PER_DIM = 1_500


class Bigram(nn.Module):
    """Next-token logits from the current token alone: E[cur] @ W_U, a rank-≤d approximation of the bigram table."""

    def __init__(self, vocab_size, dim, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        # The lesson draws E first, then W_U, from one generator: this order gives its numbers.
        self.E = nn.Parameter(rng.normal(0, 1, (vocab_size, dim)))
        self.W_U = nn.Parameter(rng.normal(0, 0.1, (dim, vocab_size)))

    def forward(self, cur):
        hidden = ag.embedding(self.E, cur)
        hidden.name = "E[cur]"
        logits = hidden @ self.W_U
        logits.name = "logits"
        return logits


def vocabulary(text):
    """Distinct characters in order of first appearance, and the text as their ids."""
    chars = list(dict.fromkeys(text))
    index = {c: i for i, c in enumerate(chars)}
    return chars, np.array([index[c] for c in text])


def pairs(ids):
    """(current, next) for every adjacent pair: the training set."""
    return ids[:-1], ids[1:]


def bigram_counts(cur, nxt, vocab_size):
    counts = np.zeros((vocab_size, vocab_size))
    np.add.at(counts, (cur, nxt), 1)
    return counts


def counting_lower_bound(cur, nxt, vocab_size):
    """H(next | current) from the counts: the mean cross-entropy of the best possible bigram model."""
    counts = bigram_counts(cur, nxt, vocab_size)
    seen = counts > 0
    row_totals = counts.sum(axis=1, keepdims=True)
    conditional = counts[seen] / np.broadcast_to(row_totals, counts.shape)[seen]
    return float(-(counts[seen] * np.log(conditional)).sum() / counts.sum())


class Diverged(RuntimeError):
    """The loss became NaN or infinite, or grew far past where it started."""

    def __init__(self, step, loss, lr):
        super().__init__(f"training diverged at step {step} (loss {loss:.4g}) with learning rate {lr:g}; "
                         f"try a smaller one, e.g. --lr {lr / 10:g}")
        self.step, self.loss, self.lr = step, loss, lr


def train(model, cur, nxt, lr, steps, log_every=100, on_log=None):
    """Full-batch SGD; returns {step: loss} at every `log_every` steps and at the last.

    The loss at step k is measured before the k-th update, so step 0 is the
    untrained model and step `steps` the model after `steps` updates.
    """
    optimizer = nn.optim.SGD(model.parameters(), lr=lr)
    losses, first = {}, None
    # Divergence is detected and reported below; NumPy's overflow warnings would only repeat it.
    with np.errstate(over="ignore", invalid="ignore"):
        for step in range(steps + 1):
            loss = ag.cross_entropy(model(cur), nxt)
            value = loss.item()
            first = value if first is None else first
            if not math.isfinite(value) or value > 10 * first:
                raise Diverged(step, value, lr)
            if step % log_every == 0 or step == steps:
                losses[step] = value
                if on_log is not None:
                    on_log(step, value)
            if step < steps:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    return losses


def next_distribution(model, token_id):
    """The model's p(next | token) as a NumPy vector."""
    with ag.no_grad():
        return ag.softmax(model(np.array([token_id])))[0].numpy()


def lesson_setup(dim=8, seed=0):
    """(model, chars, cur, nxt) for the lesson's corpus."""
    chars, ids = vocabulary(CORPUS)
    cur, nxt = pairs(ids)
    return Bigram(len(chars), dim, seed), chars, cur, nxt


def demo_loss():
    """The lesson's step-0 loss, 2.7319984903342006, as a graph with named tensors (its float64 arithmetic
    gives 2.7319984903342007, a rounding of its own)."""
    model, _, cur, nxt = lesson_setup()
    loss = ag.cross_entropy(model(cur), nxt)
    loss.name = "loss"
    return loss


def main(argv=None):
    parser = Parser("python -m models.bigram", __doc__.split("\n")[0])
    parser.add_argument("--dim", type=within_memory(interval(int, "[1, inf)"), BYTES_PER_DIM, "a unit of d"),
                        default=8, help="embedding size d")
    parser.add_argument("--lr", type=interval(float, "(0, inf)"), default=1.0, help="SGD learning rate")
    parser.add_argument("--steps", type=interval(int, "[0, inf)"), default=500, help="full-batch SGD steps")
    parser.add_argument("--seed", type=interval(int, SEEDS), default=0, help="seed of the initial E and W_U")
    args = parser.parse_args(argv)

    model, chars, cur, nxt = lesson_setup(args.dim, args.seed)
    vocab_size = len(chars)
    lessons_setup = (args.dim, args.lr, args.seed) == (8, 1.0, 0)
    section("语料与词表", "corpus, vocabulary and pairs")
    print(f"  corpus: {CORPUS}")
    print(f"  V = {vocab_size} characters, B = {len(cur)} (current, next) pairs")
    section("训练", f"d = {args.dim}, lr = {args.lr}, {counted(args.steps, 'full-batch SGD step')}, seed {args.seed}")
    try:
        losses = train(model, cur, nxt, args.lr, args.steps,
                       on_log=lambda step, loss: print(f"  step {step:4d}  loss {loss:.4f}"))
    except Diverged as exc:
        sys.exit(f"error: {exc}")
    shared = {step: LESSON_LOSSES[step] for step in losses if step in LESSON_LOSSES}
    if lessons_setup and shared:
        agree = all(f"{losses[step]:.4f}" == f"{loss:.4f}" for step, loss in shared.items())
        figures = ", ".join(f"step {step} {loss:.4f}" for step, loss in shared.items())
        print(f"  lesson 000 prints {figures}: " + ("the same to its 4 decimals" if agree else
                                                     "this run differs (see the lines above)"))
    elif not lessons_setup:
        print("  (not the lesson's set-up, d = 8, lr = 1.0, seed 0: its figures do not apply)")

    bound = counting_lower_bound(cur, nxt, vocab_size)
    final = losses[args.steps]
    section("计数下界", "the best any bigram model can do on this corpus")
    print(f"  counting lower bound {bound:.4f}  (H(next | current) from the bigram counts)")
    print(f"  ln V                 {math.log(vocab_size):.5f}  (guessing uniformly among {vocab_size})")
    print(f"  the loss ends {fixed(final - bound, 4)} above the bound", end="")
    reached = final <= bound + 0.1
    if not reached and args.dim == 1:
        print(": with d = 1, E·W_U has rank at most 1 and cannot hold the bigram table")
    elif not reached:  # d = 2 ends within 0.01 of the bound after 5000 steps: what is missing is training, not rank
        print(f": {counted(args.steps, 'step')} at lr {args.lr:g} {'has' if args.steps == 1 else 'have'} not got "
              "there; train longer (--steps) or faster (--lr)")
    else:
        print()

    eat = chars.index("吃")
    learned = next_distribution(model, eat)
    counts = bigram_counts(cur, nxt, vocab_size)[eat]
    frequencies = counts / counts.sum()
    section("预测", "p(next | 吃): what it learned beside the counts")
    print(f"  next  {'learned':>8}  {'counted':>8}")
    for j in np.argsort(-learned)[:4]:  # a tiny probability prints as 1.19e-05, wider than 0.6655: right-aligned
        print(f"  {chars[j]}    {fixed(learned[j], 4):>8}  {fixed(frequencies[j], 4):>8}")
    if reached:
        gap = np.abs(learned - frequencies).max()
        print(f"  learned and counted differ by at most {fixed(gap, 4)}: the counted frequencies minimise the loss;")
        print(f"  training approaches them but, {fixed(final - bound, 4)} above the bound, has not reached them")


if __name__ == "__main__":
    main()
