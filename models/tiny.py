"""The worked article's one-layer transformer, small enough to check by hand: 我爱 → 你.

What this file promises:

* `TinyTransformer`, an `nn.Module` with the article's exact float64 weights
  (`article_weights()`): vocabulary `<pad> <bos> 我 爱 你 他`, d = 2, sinusoidal
  positions, one causal attention head scaled by 1/√2, post-LN residual blocks
  (γ = 1, β = 0, ε = 1e-5), a ReLU feed-forward layer, and an LM head tied to
  the embedding E (logits = h Eᵀ). Its forward can hand back every intermediate
  tensor, named as the article names them.
* The article's numbers, reproduced by the engine: for the input 我爱 the last
  position's logits are [0, −0.1, −0.3, 0.4, −0.7, 0.2] (to 6 decimals: the
  article rounds), p(你) = 0.084807, loss = 2.467373, ∂L/∂logits = p − y, and
  ∂L/∂E[你] = (−0.915189, 0.915189). That row gets its gradient only through the
  tied head, since 你 is not in the input. One SGD step with lr 0.1 moves it to
  (0.291519, 0.808481), and logit(你) for the same last hidden state rises from
  −0.7 to −0.516960.
* Sampling views of a logit vector: `temperature_probs`, `top_k_probs`, `top_p_probs`.
* `demo_loss()`: that loss, with every op of the model in its graph, for `viz`.

`python -m models.tiny` prints every intermediate table in the article's order.
"""
import math
import unicodedata

import numpy as np

import autograd as ag
import nn
from models.cli import Parser

VOCAB = ["<pad>", "<bos>", "我", "爱", "你", "他"]
INPUT_IDS = [2, 3]   # 我爱
TARGET_ID = 4        # 你
LR = 0.1


def article_weights():
    """The article's parameters by name, as new float64 arrays."""
    weights = {
        "E": [[0, 0], [.1, .2], [.5, .8], [.7, .3], [.2, .9], [.6, .4]],
        "W_Q": [[.3, .4], [.5, .2]],
        "W_K": [[.2, .6], [.4, .1]],
        "W_V": [[.1, .5], [.7, .3]],
        "W_1": [[.3, .1, -.2, .4], [.2, -.3, .5, .1]],
        "b_1": [.1, .1, .1, .1],
        "W_2": [[.3, .5], [.4, -.2], [-.1, .6], [.2, .3]],
        "b_2": [0, 0],
    }
    return {name: np.array(value, dtype=np.float64) for name, value in weights.items()}


def sinusoidal_positions(num_positions, dim):
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d))."""
    pos = np.arange(num_positions)[:, None]
    freq = 10000.0 ** (-np.arange(0, dim, 2) / dim)
    pe = np.zeros((num_positions, dim))
    pe[:, 0::2] = np.sin(pos * freq)
    pe[:, 1::2] = np.cos(pos * freq)
    return pe


class TinyTransformer(nn.Module):
    """One block, post-LN: H1 = LN(H0 + attn(H0)), H2 = LN(H1 + ffn(H1)); logits = H2 Eᵀ for every position."""

    def __init__(self, weights=None):
        super().__init__()
        w = article_weights() if weights is None else weights

        def param(name):  # a float64 copy: training must not write into the caller's arrays
            return nn.Parameter(np.array(w[name], dtype=np.float64))

        # Parameters carry the article's names, so state_dict keys and graph labels read as its equations.
        self.E = param("E")
        self.W_Q, self.W_K, self.W_V = param("W_Q"), param("W_K"), param("W_V")
        self.ln1 = nn.LayerNorm(self.E.shape[1])
        self.W_1, self.b_1 = param("W_1"), param("b_1")
        self.W_2, self.b_2 = param("W_2"), param("b_2")
        self.ln2 = nn.LayerNorm(self.E.shape[1])
        # nn.LayerNorm makes γ = 1, β = 0 in the default float32; the article's arithmetic is float64.
        for ln in (self.ln1, self.ln2):
            ln.weight = nn.Parameter(np.ones(self.E.shape[1]))
            ln.bias = nn.Parameter(np.zeros(self.E.shape[1]))

    def forward(self, ids, steps=None):
        """Logits (T, V) for token ids (T,). `steps`, a dict, receives every intermediate tensor by name."""
        ids = np.asarray(ids)
        steps = {} if steps is None else steps

        def keep(name, tensor):
            tensor.name = name
            steps[name] = tensor
            return tensor

        d = self.E.shape[1]
        x = keep("X", ag.embedding(self.E, ids))
        pe = keep("PE", ag.Tensor(sinusoidal_positions(len(ids), d)))
        h0 = keep("H0", x + pe)
        # Attention and FFN hold no sub-modules of their own (their weights keep the article's names),
        # so their ops are tagged here as a sub-module's would be.
        with ag.name_scope("attn"):
            q, k, v = keep("Q", h0 @ self.W_Q), keep("K", h0 @ self.W_K), keep("V", h0 @ self.W_V)
            scores = keep("scores", (q @ k.T) / math.sqrt(d))
            causal = keep("mask", ag.Tensor(np.tril(np.ones((len(ids), len(ids)), dtype=bool))))
            weights = keep("attn_weights", ag.softmax(scores, mask=causal))
            attn = keep("attn_out", weights @ v)
        h1 = keep("H1", self.ln1(keep("H0+attn", h0 + attn)))
        with ag.name_scope("ffn"):
            pre = keep("ffn_pre", h1 @ self.W_1 + self.b_1)
            hidden = keep("ffn_hidden", pre.relu())
            ffn = keep("ffn_out", hidden @ self.W_2 + self.b_2)
        h2 = keep("H2", self.ln2(keep("H1+ffn", h1 + ffn)))
        head = self.E.T  # the LM head is the embedding table itself (tied weights)
        head.name = "Eᵀ"
        return keep("logits", h2 @ head)


def last_position_loss(logits, target):
    """−log p(target) at the last position: the article predicts the next token from there only."""
    last = logits[-1]
    last.name = "logits[-1]"
    loss = ag.cross_entropy(last, target)
    loss.name = "loss"
    return loss


def demo_loss():
    """The article's loss, 2.467373, with every op of the model in its graph."""
    model = TinyTransformer()
    return last_position_loss(model(INPUT_IDS), TARGET_ID)


def temperature_probs(logits, temperature):
    """softmax(z / T): T < 1 sharpens the distribution, T > 1 flattens it."""
    return ag.softmax(logits / temperature)


def top_k_probs(logits, k):
    """softmax over the k largest logits only; every other token gets probability 0."""
    order = np.argsort(-logits.numpy(), kind="stable")
    keep = np.zeros(logits.shape, dtype=bool)
    keep[order[:k]] = True
    return ag.softmax(logits, mask=keep)


def top_p_probs(logits, top_p):
    """Nucleus sampling: the most likely tokens until their probability reaches top_p, renormalised."""
    probs = ag.softmax(logits).numpy()
    order = np.argsort(-probs, kind="stable")
    mass_before = np.cumsum(probs[order]) - probs[order]
    keep = np.zeros(logits.shape, dtype=bool)
    keep[order[mass_before < top_p]] = True
    return ag.softmax(logits, mask=keep)


def _width(text):
    """Columns a string takes in a terminal: CJK characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _pad(text, width, right=False):
    gap = " " * max(0, width - _width(text))
    return gap + text if right else text + gap


def _number(value):
    if np.isneginf(value):
        return "-inf"
    return f"{0.0 if abs(value) < 5e-7 else value:.6f}"  # no "-0.000000"


def format_table(values, rows, cols):
    """A labelled table of numbers with 6 decimals (a vector is one row)."""
    values = np.atleast_2d(values)
    cells = [[_number(v) for v in row] for row in values]
    row_width = max(_width(r) for r in rows)
    col_width = max([_width(c) for c in cols] + [len(s) for row in cells for s in row])
    lines = ["  " + _pad("", row_width) + "".join("  " + _pad(c, col_width, right=True) for c in cols)]
    for label, row in zip(rows, cells):
        lines.append("  " + _pad(label, row_width) + "".join("  " + _pad(s, col_width, right=True) for s in row))
    return "\n".join(lines)


def _section(title):
    print(f"\n── {title} " + "─" * max(4, 72 - _width(title)))


def _table(title, tensor, rows, cols, note=None):
    _section(title)
    values = tensor.numpy() if isinstance(tensor, ag.Tensor) else tensor
    print(format_table(values, rows, cols))
    if note:
        print(f"  {note}")


def main(argv=None):
    parser = Parser("python -m models.tiny", __doc__.split("\n")[0])
    parser.parse_args(argv)

    model = TinyTransformer()
    steps = {}
    logits = model(INPUT_IDS, steps=steps)
    logits.retain_grad()
    loss = last_position_loss(logits, TARGET_ID)
    loss.backward()

    tokens = [VOCAB[i] for i in INPUT_IDS]
    dims = [f"d{i}" for i in range(model.E.shape[1])]
    hidden_dims = [f"h{i}" for i in range(model.W_1.shape[1])]
    positions = [f"{t} (pos {i})" for i, t in enumerate(tokens)]
    last = f"{tokens[-1]} (pos {len(tokens) - 1})"
    target = VOCAB[TARGET_ID]

    print(f"A one-layer transformer by hand: {''.join(tokens)} → {target}, every number computed by the engine.")
    _section("tokens")
    for label, token_id in zip(positions, INPUT_IDS):
        print(f"  {label}  id {token_id}")
    print(f"  target: {target} (id {TARGET_ID}), predicted from the last position")
    onehot = np.eye(len(VOCAB))[INPUT_IDS]
    _table("one-hot rows", onehot, positions, VOCAB)
    with ag.no_grad():
        same = np.allclose((ag.Tensor(onehot) @ model.E).numpy(), steps["X"].numpy())
    _table("X = embeddings (rows of E picked by the ids)", steps["X"], positions, dims,
           note=f"one-hot · E gives the same rows: {same}")
    _table("PE = sinusoidal positions (sin pos, cos pos)", steps["PE"], positions, dims)
    _table("H⁽⁰⁾ = X + PE", steps["H0"], positions, dims)
    for name in ("Q", "K", "V"):
        _table(f"{name} = H⁽⁰⁾ W_{name}", steps[name], positions, dims)
    _table("scores = Q Kᵀ / √2   (rows: queries, columns: keys)", steps["scores"], positions, tokens)
    masked = ag.where(steps["mask"], steps["scores"].detach(), -np.inf)
    _table("masked scores (causal: a position sees only itself and earlier ones)", masked, positions, tokens)
    _table("attention weights = softmax(masked scores)", steps["attn_weights"], positions, tokens)
    _table("attention output = weights · V", steps["attn_out"], positions, dims)
    _table("residual: H⁽⁰⁾ + attention", steps["H0+attn"], positions, dims)
    _table("H⁽¹⁾ = LayerNorm(H⁽⁰⁾ + attention)", steps["H1"], positions, dims)
    _table("FFN hidden before ReLU = H⁽¹⁾ W_1 + b_1", steps["ffn_pre"], positions, hidden_dims)
    _table("FFN hidden after ReLU", steps["ffn_hidden"], positions, hidden_dims)
    _table("FFN output = ReLU(·) W_2 + b_2", steps["ffn_out"], positions, dims)
    _table("residual: H⁽¹⁾ + FFN", steps["H1+ffn"], positions, dims)
    _table("H⁽²⁾ = LayerNorm(H⁽¹⁾ + FFN)", steps["H2"], positions, dims)

    last_logits = logits.detach()[-1]
    probs = ag.softmax(last_logits)
    _table("logits = h Eᵀ at the last position (LM head tied to E)", last_logits, [last], VOCAB)
    _table("probabilities = softmax(logits)", probs, [last], VOCAB,
           note=f"p({target}) = {probs.numpy()[TARGET_ID]:.6f}")

    _section("sampling the next token")
    greedy = int(np.argmax(last_logits.numpy()))
    print(f"  greedy (argmax): {VOCAB[greedy]}")
    temperatures = [0.5, 1.0, 2.0]
    by_temperature = np.stack([temperature_probs(last_logits, t).numpy() for t in temperatures])
    print("  temperature T: softmax(logits / T)")
    print(format_table(by_temperature, [f"T = {t:g}" for t in temperatures], VOCAB))
    print("  top-k = 3: keep the 3 largest logits, renormalise")
    print(format_table(top_k_probs(last_logits, 3).numpy(), ["top-k 3"], VOCAB))
    print("  top-p = 0.5: keep the likeliest tokens until their mass reaches 0.5, renormalise")
    print(format_table(top_p_probs(last_logits, 0.5).numpy(), ["top-p 0.5"], VOCAB))

    _section("loss")
    print(f"  L = −log p({target}) = {loss.item():.6f}")

    onehot_target = np.eye(len(VOCAB))[TARGET_ID]
    _section("∂L/∂logits = p − y (the softmax and the log cancel)")
    print(format_table(np.stack([probs.numpy(), onehot_target, logits.grad[-1]]),
                       ["p", "y", "p − y = ∂L/∂logits"], VOCAB))
    print("\n  Every parameter's gradient follows. Those of the layers below the last LayerNorm are tiny:")
    print("  over d = 2, LayerNorm sends any (a, b) to about ±(1, −1), so hardly any gradient gets through it.")
    labels = {"E": VOCAB, "W_1": dims, "W_2": hidden_dims}
    col_labels = {"W_1": hidden_dims, "b_1": hidden_dims}
    for name, param in model.named_parameters():
        rows = labels.get(name, dims) if param.ndim == 2 else [name]
        cols = col_labels.get(name, dims)
        note = None
        if name == "E":
            note = (f"row {target} comes only from the tied head ({target} is not in the input): "
                    f"(p({target}) − 1) · h = {_number(logits.grad[-1][TARGET_ID])} · h;\n"
                    f"  rows {'/'.join(tokens)} also get the embedding lookup's share")
        _table(f"∂L/∂{name}", param.grad, rows, cols, note=note)

    old_row = model.E.numpy()[TARGET_ID].copy()
    old_logit = last_logits.numpy()[TARGET_ID]
    optimizer = nn.optim.SGD(model.parameters(), lr=LR)
    optimizer.step()
    with ag.no_grad():
        new_logit = (steps["H2"][-1] @ model.E[TARGET_ID]).item()
    _section(f"one SGD step, lr = {LR:g}: E[{target}] ← E[{target}] − lr · ∂L/∂E[{target}]")
    print(format_table(np.stack([old_row, model.E.grad[TARGET_ID], model.E.numpy()[TARGET_ID]]),
                       [f"E[{target}] before", f"∂L/∂E[{target}]", f"E[{target}] after"], dims))
    print(f"  logit({target}) = h · E[{target}] for the same last hidden state h: "
          f"{_number(old_logit)} → {_number(new_logit)}")
    with ag.no_grad():
        recomputed = model(INPUT_IDS)[-1].numpy()[TARGET_ID]
    print(f"  (the whole forward again, after every parameter took its step, LayerNorm's γ and β too: "
          f"{_number(recomputed)})")


if __name__ == "__main__":
    main()
