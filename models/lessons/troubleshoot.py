"""A lesson on failure: three ways training a GPT goes wrong, and what the tools say about each.

    python -m models.troubleshoot            # about 10 s on 2 cores (30 s while the kernels first compile); the
                                             # health report goes to a new temporary folder it names
                                             # (--out-dir DIR: there instead)
    notebooks/troubleshoot.ipynb             # the same, a cell per step, with an exercise

Each failure is reproduced on a small GPT (2 layers, 4 heads, 128 wide, blocks of
32 characters of Tiny Shakespeare, batches of 8), seeded, so the tools print
the same lines on every run:

1. A learning rate 30× too high (SGD with momentum: 3 instead of 0.1), with
   the loss written as it often first is, −log softmax(z)[y] in two ops. The
   logits spread, a target's probability underflows to a subnormal number
   (4e-45), and Log's VJP g/p overflows: the loss is NaN one step later. Run
   again under `ag.detect_anomaly()`, the error names the op (the backward of
   Log), its rule and its inputs. The fused `ag.cross_entropy` computes that
   gradient as p − y, dividing by nothing: with it the same learning rate
   runs several steps more, until the weights have grown so large that a
   matrix product overflows float32 (which product comes first is then a
   matter of rounding, so the lesson does not rest its story on it). (AdamW
   with clipping, as models.train trains, forgives 30×: measured, it learns
   worse but stays finite. Its stop line suggests --detect-anomaly for when
   it does not.)
2. An initialisation 10× too large (weights ~ N(0, 0.2²), not 0.02²). Nothing
   is NaN; the health report (models/training/health.py) warns that GELU's
   inputs sit below −3 (9%, where GPT-2's init puts none), and shows the
   attention entropies at a quarter of an even spread's.
3. A custom op whose VJP has a sign error (`SignErrorGELU`, put in block
   h.1's MLP). `ag.gradcheck` shows the table of analytic against numeric
   gradients. In a model the bug hides: every loss is right and training
   still learns through the other paths. `health.descent_check` moves each
   weight along its gradient and compares the loss's change with what the
   gradient predicts: 1 where the gradient is right, −1 for the weights that
   get it only through the wrong op (h.1.mlp.c_fc), in between for the layers
   below it: that is where the gradient, and so training, goes wrong.

What this file promises: `lr_too_high()`, `init_too_large(out_dir)` and
`sign_error()` each reproduce one failure, print what the tools say and
return it (the AnomalyError, the warnings, the descent ratios);
`SignErrorGELU` and `grade(op)` are the notebook's exercise: fix the VJP
until gradcheck accepts it.
"""
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

import autograd as ag
import nn
from autograd.ops import GELU
from models.cli import Parser, folder_path
from models.io import owning_folder
from models.training.checkpoint import CHECKPOINT_MARKS, PREPARED_MARKS
from models.training.data import load_text
from models.gpt.gpt2 import GPT, MLP, GPTConfig
from models.training.health import Health, layer_name, descent_check
from models.numbers import section
from models.gpt.tokenizer import CharTokenizer

CONFIG = {"block_size": 32, "n_layer": 2, "n_head": 4, "n_embd": 128}
BATCH, SEED = 8, 0
TEXT_CHARS = 200_000  # the start of Tiny Shakespeare is plenty for a few hundred steps


class SignErrorGELU(GELU):
    """GELU with the deliberate mistake of this lesson: its VJP has the wrong sign.

    The forward is GELU's own, so every loss it computes is right; only the
    gradient that flows back through it points the wrong way.
    """

    rule = "dx = −g·s·(1 + x(1−s)·2u′)   ← the sign is wrong"

    def backward(self, g):
        return -super().backward(g)


class MLPWith(MLP):
    """An MLP that applies the op `activation` instead of GELU, reusing `mlp`'s own layers."""

    def __init__(self, mlp, activation):
        nn.Module.__init__(self)
        self.c_fc, self.c_proj, self.dropout = mlp.c_fc, mlp.c_proj, mlp.dropout
        self.activation = activation

    def forward(self, x):
        return self.dropout(self.c_proj(self.activation.apply(self.c_fc(x))))


def data():
    text = load_text()[:TEXT_CHARS]
    tokenizer = CharTokenizer(text)
    return tokenizer.vocab_size, np.array(tokenizer.encode(text))


def make_model(vocab_size, init_scale=1.0):
    """The lesson's GPT, seeded; `init_scale` multiplies every weight matrix GPT-2's init drew."""
    ag.manual_seed(SEED)
    model = GPT(GPTConfig(vocab_size=vocab_size, **CONFIG))
    for p in model.parameters():
        if p.ndim == 2:
            p.data *= init_scale
    return model


def batches(tokens):
    """Random blocks of the text and their next characters, (x, y), seeded."""
    rng = np.random.default_rng(SEED)
    T = CONFIG["block_size"]
    while True:
        starts = rng.integers(0, len(tokens) - T - 1, BATCH)
        yield np.stack([tokens[s:s + T] for s in starts]), np.stack([tokens[s + 1:s + T + 1] for s in starts])


def two_op_loss(model, x, y):
    """The mean of −log softmax(z)[y] written in two ops, softmax then Log: right, until a probability underflows."""
    logits, _ = model(ag.Tensor(x))
    B, T, V = logits.shape
    p = logits.softmax(-1).reshape(B * T, V)  # (B·T, V)
    return -p[np.arange(B * T), y.reshape(-1)].log().mean()


def fused_loss(model, x, y):
    """The model's own loss, ag.cross_entropy: its VJP is p − onehot(y)."""
    return model(ag.Tensor(x), ag.Tensor(y))[1]


def train(model, optimizer, tokens, steps, health=None, anomaly=None, loss_fn=fused_loss):
    """Plain steps: the losses, ending at the first NaN/inf one; `anomaly` (a detect_anomaly) learns the step."""
    losses = []
    for it, (x, y) in zip(range(steps), batches(tokens)):
        if anomaly is not None:
            anomaly.where = f"step {it}"
        optimizer.zero_grad()
        loss = loss_fn(model, x, y)
        loss.backward()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            break
        if health is not None:
            health.after_backward(it, x)
        optimizer.step()
        if health is not None:
            health.after_step(it)
    return losses


def lr_too_high(out=print):
    """SGD at lr 3, 30× the 0.1 that trains this model, on the two-op loss: it goes NaN; detect_anomaly names the
    backward of Log. The fused cross-entropy lasts longer at the same rate."""
    vocab_size, tokens = data()

    def sgd(model):
        return nn.optim.SGD(model.parameters(), lr=3.0, momentum=0.9)
    model = make_model(vocab_size)
    with np.errstate(all="ignore"):
        losses = train(model, sgd(model), tokens, 50, loss_fn=two_op_loss)
    out(f"losses: {', '.join(f'{x:.2f}' for x in losses)}")
    out(f"the loss became {losses[-1]} at step {len(losses) - 1}: stopped")
    model = make_model(vocab_size)
    try:
        with np.errstate(all="ignore"), ag.detect_anomaly() as anomaly:
            train(model, sgd(model), tokens, 50, anomaly=anomaly, loss_fn=two_op_loss)
    except ag.AnomalyError as exc:
        out(str(exc))
        error = exc
    else:
        raise AssertionError("lr_too_high: the run stayed finite; the lesson expects a NaN")
    model = make_model(vocab_size)
    with np.errstate(all="ignore"):
        fused = train(model, sgd(model), tokens, 50)
    out(f"with ag.cross_entropy (VJP p − y, no division) the same run lasts {len(fused) - len(losses)} steps "
        f"more: its loss became {fused[-1]} at step {len(fused) - 1}, once the grown weights overflowed float32")
    return error


def init_too_large(out_dir, out=print, steps=30):
    """Weights 10× GPT-2's: AdamW trains, no NaN, but the health report warns that GELU saturates."""
    vocab_size, tokens = data()
    model = make_model(vocab_size, init_scale=10.0)
    lines = []
    health = Health(model, 5, out_dir, say=lines.append, window=10)
    losses = train(model, nn.optim.AdamW(model.parameters(), lr=1e-3), tokens, steps, health)
    health.close()
    out(f"losses: {losses[0]:.2f} at step 0, {losses[-1]:.2f} at step {len(losses) - 1}")
    first = health.history()[0]["blocks"]
    for block, figures in first.items():
        out(f"step 0, {block}: {figures['gelu_below_-3']:.0%} of GELU inputs below -3, attention entropy per head "
            f"{', '.join(f'{e:.2f}' for e in figures['attention_entropy'])} nats "
            f"(uniform over the keys would be {uniform_entropy(CONFIG['block_size']):.2f})")
    for line in lines:
        out(line)
    return [line for line in lines if line.startswith("health: ")]


def uniform_entropy(T):
    """Mean entropy of causal attention spread evenly: position t sees t + 1 keys, ln(t + 1) nats."""
    return float(np.mean(np.log(np.arange(1, T + 1))))


def grade(op):
    """The exercise's grader: `op` (a Function class like GELU) against finite differences, one line."""
    x = ag.Tensor(np.random.default_rng(1).normal(0, 2, (3, 4)), requires_grad=True)  # float64 for gradcheck
    try:
        ag.gradcheck(lambda t: op.apply(t), [x])
    except ag.GradcheckError as exc:
        return f"not yet: backward() disagrees with finite differences\n{exc}"
    return "correct: backward matches finite differences"


def sign_error(out=print):
    """SignErrorGELU in h.1's MLP: gradcheck's table names the op; the descent check names where it sits."""
    out(grade(SignErrorGELU))
    vocab_size, tokens = data()
    model = make_model(vocab_size)
    block = model.transformer.h[1]
    block.mlp = MLPWith(block.mlp, SignErrorGELU)
    x, y = next(batches(tokens))
    ratios = descent_check(model, x, y)
    out("the loss along each weight's gradient, over what the gradient predicts (1 when it is right):")
    for name, ratio in ratios.items():
        out(f"  {layer_name(name):18s} {ratio:+.3f}" + ("  ← points uphill" if ratio < 0 else ""))
    names = list(ratios)
    wrong = [name for name in names if ratios[name] < 0]
    after = names[names.index(wrong[-1]) + 1]
    out(f"{layer_name(wrong[-1])}'s gradient points uphill, {layer_name(after)}'s just after it is right: the op "
        f"between them has a wrong VJP (here {SignErrorGELU.__name__}); the layers before get a mix (0 < ratio < 1)")
    return ratios


def main(argv=None):
    p = Parser("python -m models.troubleshoot", __doc__.splitlines()[0])
    p.add_argument("--out-dir", type=folder_path, default=None, metavar="DIR",
                   help="where failure 2's health report goes (health.jsonl, health.png) (default: a new folder "
                        "under the system's temporary folder, never the current one: a lesson is no project)")
    args = p.parse_args(argv)
    out_dir = Path(args.out_dir) if args.out_dir else Path(tempfile.mkdtemp(prefix="gptgrad-troubleshoot-"))
    # a run's health report there would be replaced, and a folder inside a checkpoint is one more that models.train
    # refuses to save over
    owner = owning_folder(out_dir, CHECKPOINT_MARKS + PREPARED_MARKS)
    if owner is not None:
        p.error(f"--out-dir {args.out_dir}: {owner} holds a checkpoint or a prepared corpus, which the lesson's "
                "health.jsonl and health.png would change; give the lesson a folder of its own")
    try:  # now, not when failure 2 writes there seconds later: a --out-dir that cannot be a folder says so
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        p.error(f"--out-dir {args.out_dir}: cannot make that folder ({exc.strerror or exc})")
    section("failure 1", "a learning rate 30× too high, and a loss in two ops: the loss goes NaN")
    lr_too_high()
    section("failure 2", "an initialisation 10× too large: GELU saturates, attention sharpens")
    init_too_large(out_dir)  # its health monitor names the files it wrote
    section("failure 3", "a custom op whose VJP has a sign error")
    sign_error()
    return 0


if __name__ == "__main__":
    sys.exit(main())
