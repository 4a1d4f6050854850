"""The worked article's one-layer transformer, small enough to check by hand: 我爱 → 你.

What this file promises:

* `TinyTransformer`, an `nn.Module` with the article's exact float64 weights
  (`article_weights()`): vocabulary `<pad> <bos> 我 爱 你 他`, d = 2, sinusoidal
  positions, one causal attention head scaled by 1/√2, post-LN residual blocks
  (γ = 1, β = 0, ε = 1e-5), a ReLU feed-forward layer, and an LM head tied to
  the embedding E (logits = h Eᵀ). Its forward can hand back every intermediate
  tensor, named as the article names them.
* The article's numbers, reproduced by the engine: for the input 我爱 the last
  position's logits are [0, −0.1, −0.3, 0.4, −0.7, 0.2] to 5 decimals (within
  2.8e-6 of the article's: LayerNorm's ε), p(你) = 0.084807, loss = 2.467373,
  ∂L/∂logits = p − y, and ∂L/∂E[你] = (−0.915189, 0.915189). That row gets its
  gradient only through the tied head, since 你 is not in the input. One SGD
  step with lr 0.1 moves it to (0.291519, 0.808481), and logit(你) for the same
  last hidden state rises from −0.699997 to −0.516960.
* Sampling views of a logit vector: `temperature_probs`, `top_k_probs`, `top_p_probs`.
* `demo_loss()`: that loss, with every op of the model in its graph, for `viz`.

`python -m models.tiny` prints every intermediate table in the article's order,
each headed by the article's section. Wherever the article's figure differs
(it rounds, it leaves out LayerNorm's ε, it keeps γ and β fixed, and two of its
sampling rows are wrong), a line marked '≠ article' says by how much and why,
with the arithmetic. Values below 1e-4 print in scientific notation.
"""
import math

import numpy as np

import autograd as ag
import nn
from models.gpt import sampling
from models.cli import Parser
from models.numbers import fixed, format_table, section

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
        pe = keep("PE", ag.Tensor(sinusoidal_positions(len(ids), d), device=self.E.device))
        h0 = keep("H0", x + pe)
        # Attention and FFN hold no sub-modules of their own (their weights keep the article's names),
        # so their ops are tagged here as a sub-module's would be.
        with ag.name_scope("attn"):
            q, k, v = keep("Q", h0 @ self.W_Q), keep("K", h0 @ self.W_K), keep("V", h0 @ self.W_V)
            k_t = keep("Kᵀ", k.T)
            qk = keep("QKᵀ", q @ k_t)
            root_d = keep("√d", ag.Tensor(math.sqrt(d), dtype=qk.dtype, device=self.E.device))  # the scale, named
            scores = keep("scores", qk / root_d)
            causal = keep("mask", ag.Tensor(np.tril(np.ones((len(ids), len(ids)), dtype=bool)), device=self.E.device))
            weights = keep("attn_weights", ag.softmax(scores, mask=causal))
            attn = keep("attn_out", weights @ v)
        h1 = keep("H1", self.ln1(keep("H0+attn", h0 + attn)))
        with ag.name_scope("ffn"):
            pre = keep("ffn_pre", keep("H1·W_1", h1 @ self.W_1) + self.b_1)
            hidden = keep("ffn_hidden", pre.relu())
            ffn = keep("ffn_out", keep("hidden·W_2", hidden @ self.W_2) + self.b_2)
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
    """softmax over the k largest logits only (GPT.generate's filter); every other token gets probability 0."""
    return ag.softmax(logits, mask=sampling.top_k_mask(logits.data, k))


def top_p_probs(logits, top_p):
    """Nucleus sampling (GPT.generate's filter): the likeliest tokens until their mass reaches top_p, renormalised."""
    return ag.softmax(logits, mask=sampling.top_p_mask(ag.softmax(logits).data, top_p))


# Figures the article prints that exact arithmetic does not give; main() says by how much and why.
ARTICLE = {
    "score 爱→我": 0.777,
    "LayerNorm": 1.0,
    "FFN h0 at 我": 0.0,
    "p(你)": 0.085,
    "loss": 2.465,
    "T = 0.5": {"爱": 0.396, "你": 0.045, "他": 0.266},
    "top-k 3": {"爱": 0.405, "他": 0.332, "<pad>": 0.272},
}


def _table(article_section, title, tensor, rows, cols, note=None):
    section(article_section, title)
    values = tensor.numpy() if isinstance(tensor, ag.Tensor) else tensor
    print(format_table(values, rows, cols))
    if note:
        print(f"  {note}")


def _article(text):
    """A line where the article's figure differs from the engine's: by how much, and why."""
    print(f"  ≠ article: {text}")


def _signed(x):
    return ("+" if x >= 0 else "") + fixed(x)


def explain_score(steps):
    """The article's S[爱, 我] = 0.777 against the exact Q[爱]·K[我]/√2."""
    q, k = steps["Q"].numpy()[1], steps["K"].numpy()[0]
    exact = steps["scores"].numpy()[1, 0]
    other = steps["scores"].numpy()[1, 1]
    article = ARTICLE["score 爱→我"]
    weight = 1 / (1 + math.exp(other - article))  # softmax over two scores is a sigmoid of their difference
    engine_weight = steps["attn_weights"].numpy()[1, 0]
    _article(f"S[爱, 我] = {article:.3f}, here {fixed(exact)} ({_signed(exact - article)}): "
             f"the article multiplied rounded Q and K.")
    print(f"    exact: (Q[爱]·K[我]) / √2 = ({fixed(q[0])}·{fixed(k[0])} + {fixed(q[1])}·{fixed(k[1])}) / √2 "
          f"= {fixed(exact)}")
    print(f"    from {article:.3f}, softmax would weigh row 爱 {fixed(weight)} / {fixed(1 - weight)} "
          f"instead of the {fixed(engine_weight)} / {fixed(1 - engine_weight)} below")


def explain_layer_norm(residual, normed, eps):
    """LayerNorm over d = 2 gives ±δ/√(δ² + ε), not ±1."""
    a, b = residual[0]
    delta = (a - b) / 2
    _article(f"±{ARTICLE['LayerNorm']:.3f}, here ±{fixed(abs(normed[0, 0]))} "
             f"({_signed(abs(normed[0, 0]) - ARTICLE['LayerNorm'])}): LayerNorm divides by √(variance + ε), "
             f"ε = {eps:g}.")
    normed_by_hand = abs(delta) / math.sqrt(delta * delta + eps)
    print(f"    over d = 2 a row (a, b) becomes ±δ/√(δ² + ε) with δ = (a − b)/2; row 我: δ = {fixed(delta)}, "
          f"{fixed(abs(delta))}/√({fixed(delta * delta)} + {eps:g}) = {fixed(normed_by_hand)}")


def explain_ffn_kink(h1, w_1, b_1, pre):
    """The article's 0 at h0 of 我 is 0.1·(1 − 0.999967) here: ReLU's input is just above its kink."""
    x0, x1 = h1[0]
    value = pre[0, 0]
    _article(f"h0 at 我 = {ARTICLE['FFN h0 at 我']:g}, here {fixed(value)}: with H⁽¹⁾[我] = "
             f"({fixed(x0)}, {fixed(x1)}) instead of (−1, 1),")
    print(f"    {w_1[0, 0]:g}·({fixed(x0)}) + {w_1[1, 0]:g}·{fixed(x1)} + {b_1[0]:g} = {fixed(value)} "
          f"{'> 0, so ReLU lets it through' if value > 0 else '≤ 0, so ReLU stops it'}")


def explain_sampling_row(name, probs, z, kept, symbol, kept_text):
    """The article's row `name` of a sampling table is wrong: its figures, the right ones, and the arithmetic.

    `z` are the logits the row's softmax sees (already divided by T), `kept` the positions it keeps.
    """
    article = ARTICLE[name]
    wrong = " / ".join(f"p({t}) = {v:.3f}" for t, v in article.items())
    right = " / ".join(f"{probs[VOCAB.index(t)]:.4f}" for t in article)
    _article(f"the article's {name} row is wrong: {wrong} (these alone sum to {sum(article.values()):.3f}).")
    print(f"    The right values are {right}:")
    e = np.exp(z)
    total = e[kept].sum()
    print(f"    {symbol} {kept_text} = ({', '.join(fixed(v) for v in z[kept])})")
    print(f"    e^({symbol}) = ({', '.join(fixed(v) for v in e[kept])}), Σ = {fixed(total)}")
    for t in article:
        i = VOCAB.index(t)
        print(f"    p({t}) = {fixed(e[i])} / {fixed(total)} = {fixed(e[i] / total)}")


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
    print("Each heading names the article's section first. Where the article's figure differs, a line marked")
    print("'≠ article' says by how much and why. Values below 1e-4 print as 1.23e-05: tiny is not zero.")
    section("输入", "tokens")
    for label, token_id in zip(positions, INPUT_IDS):
        print(f"  {label}  id {token_id}")
    print(f"  target: {target} (id {TARGET_ID}), predicted from the last position")
    onehot = np.eye(len(VOCAB))[INPUT_IDS]
    _table("输入", "one-hot rows", onehot, positions, VOCAB)
    with ag.no_grad():
        same = np.allclose((ag.Tensor(onehot) @ model.E).numpy(), steps["X"].numpy())
    _table("词嵌入", "X = embeddings (rows of E picked by the ids)", steps["X"], positions, dims,
           note=f"one-hot · E gives the same rows: {same}")
    _table("位置编码", "PE = sinusoidal positions (sin pos, cos pos)", steps["PE"], positions, dims)
    _table("位置编码", "H⁽⁰⁾ = X + PE", steps["H0"], positions, dims)
    for name in ("Q", "K", "V"):
        _table("自注意力", f"{name} = H⁽⁰⁾ W_{name}", steps[name], positions, dims)
    _table("自注意力", "scores = Q Kᵀ / √2   (rows: queries, columns: keys)", steps["scores"], positions, tokens)
    explain_score(steps)
    masked = ag.where(steps["mask"], steps["scores"].detach(), -np.inf)
    _table("因果掩码", "masked scores (causal: a position sees only itself and earlier ones)", masked, positions, tokens)
    _table("自注意力", "attention weights = softmax(masked scores)", steps["attn_weights"], positions, tokens)
    _table("自注意力", "attention output = weights · V", steps["attn_out"], positions, dims)
    _table("残差连接", "residual: H⁽⁰⁾ + attention", steps["H0+attn"], positions, dims)
    _table("层归一化", "H⁽¹⁾ = LayerNorm(H⁽⁰⁾ + attention)", steps["H1"], positions, dims)
    explain_layer_norm(steps["H0+attn"].numpy(), steps["H1"].numpy(), model.ln1.eps)
    _table("前馈网络", "FFN hidden before ReLU = H⁽¹⁾ W_1 + b_1", steps["ffn_pre"], positions, hidden_dims)
    explain_ffn_kink(steps["H1"].numpy(), model.W_1.numpy(), model.b_1.numpy(), steps["ffn_pre"].numpy())
    _table("前馈网络", "FFN hidden after ReLU", steps["ffn_hidden"], positions, hidden_dims)
    _table("前馈网络", "FFN output = ReLU(·) W_2 + b_2", steps["ffn_out"], positions, dims)
    _table("残差连接", "residual: H⁽¹⁾ + FFN", steps["H1+ffn"], positions, dims)
    _table("层归一化", "H⁽²⁾ = LayerNorm(H⁽¹⁾ + FFN)", steps["H2"], positions, dims)
    h = steps["H2"].numpy()[-1]
    print(f"  the same ε: ±{fixed(abs(h[0]))}; δ is larger here, so closer to 1 (the article: ±1)")

    last_logits = logits.detach()[-1]
    z = last_logits.numpy()
    probs = ag.softmax(last_logits)
    p = probs.numpy()
    _table("输出层", "logits = h Eᵀ at the last position (LM head tied to E)", last_logits, [last], VOCAB)
    article_logits = model.E.numpy() @ np.array([1.0, -1.0])
    _article(f"({', '.join(f'{v:g}' for v in article_logits)}), here within "
             f"{np.abs(z - article_logits).max():.1e} of those:")
    print(f"    logit(v) = h·E[v] with h = H⁽²⁾[{tokens[-1]}] = ({fixed(h[0])}, {fixed(h[1])}) (LayerNorm's ε), "
          "where the article's h = (1, −1)")
    _table("Softmax", "probabilities = softmax(logits)", probs, [last], VOCAB,
           note=f"p({target}) = {fixed(p[TARGET_ID])} (the article rounds it to {ARTICLE['p(你)']:.3f})")

    section("采样", "sampling the next token")
    greedy = int(np.argmax(z))
    print(f"  greedy (argmax): {VOCAB[greedy]}")
    temperatures = [0.5, 1.0, 2.0]
    by_temperature = np.stack([temperature_probs(last_logits, t).numpy() for t in temperatures])
    print("  temperature T: softmax(logits / T)")
    print(format_table(by_temperature, [f"T = {t:g}" for t in temperatures], VOCAB))
    sharp = by_temperature[0]
    explain_sampling_row("T = 0.5", sharp, z / 0.5, np.arange(len(VOCAB)), "z/T", "(= 2z), every token")
    print("  top-k = 3: keep the 3 largest logits, renormalise")
    top3 = top_k_probs(last_logits, 3).numpy()
    print(format_table(top3, ["top-k 3"], VOCAB))
    explain_sampling_row("top-k 3", top3, z, np.argsort(-z, kind="stable")[:3], "z", "of the 3 largest")
    print("  top-p = 0.5: keep the likeliest tokens until their mass reaches 0.5, renormalise")
    print(format_table(top_p_probs(last_logits, 0.5).numpy(), ["top-p 0.5"], VOCAB))

    section("损失函数", "loss")
    print(f"  L = −log p({target}) = {fixed(loss.item())}")
    _article(f"{ARTICLE['loss']:.3f} = −ln {ARTICLE['p(你)']:.3f} = {-math.log(ARTICLE['p(你)']):.6f}: it rounded "
             f"p({target}) before the log; −ln {fixed(p[TARGET_ID])} = {fixed(loss.item())} "
             f"({_signed(loss.item() - ARTICLE['loss'])})")

    onehot_target = np.eye(len(VOCAB))[TARGET_ID]
    section("反向传播", "∂L/∂logits = p − y (the softmax and the log cancel)")
    print(format_table(np.stack([p, onehot_target, logits.grad[-1]]),
                       ["p", "y", "p − y = ∂L/∂logits"], VOCAB))
    print("\n  Every parameter's gradient follows. Those of the layers below the last LayerNorm are tiny:")
    print("  over d = 2, LayerNorm sends any (a, b) to about ±(1, −1), so hardly any gradient gets through it.")
    print("  Exactly 0.000000 means no path: the loss reads position 爱 only, and ReLU closes h2 there.")
    labels = {"E": VOCAB, "W_1": dims, "W_2": hidden_dims}
    col_labels = {"W_1": hidden_dims, "b_1": hidden_dims}
    dz_target = logits.grad[-1][TARGET_ID]
    for name, param in model.named_parameters():
        rows = labels.get(name, dims) if param.ndim == 2 else [name]
        cols = col_labels.get(name, dims)
        _table("反向传播", f"∂L/∂{name}", param.grad, rows, cols)
        if name == "E":
            print(f"  row {target} comes only from the tied head ({target} is not in the input): "
                  f"(p({target}) − 1) · h = {fixed(dz_target)} · h;")
            print(f"  rows {'/'.join(tokens)} also get the embedding lookup's share")
            _article(f"({fixed(dz_target)}, {fixed(-dz_target)}), the gradient for h = (1, −1); "
                     f"here h = ({fixed(h[0])}, {fixed(h[1])}) (LayerNorm's ε):")
            print(f"    {fixed(dz_target)} × {fixed(h[0])} = {fixed(dz_target * h[0])}")

    print("  ≠ article: it keeps LayerNorm's γ = 1 and β = 0 fixed, so it has no ∂L/∂ln*.weight or ∂L/∂ln*.bias;")
    print("    here they are parameters (nn.LayerNorm) with a gradient, and they train")

    old_row = model.E.numpy()[TARGET_ID].copy()
    old_logit = z[TARGET_ID]
    before = {name: param.numpy().copy() for name, param in model.named_parameters() if name.startswith("ln")}
    nn.optim.SGD(model.parameters(), lr=LR).step()
    with ag.no_grad():
        new_logit = (steps["H2"][-1] @ model.E[TARGET_ID]).item()
        recomputed = model(INPUT_IDS)[-1].numpy()[TARGET_ID]
        for name, param in model.named_parameters():
            if name.startswith("ln"):
                param.data[...] = before[name]
        without_layer_norm_step = model(INPUT_IDS)[-1].numpy()[TARGET_ID]
    section("参数更新", f"one SGD step, lr = {LR:g}: E[{target}] ← E[{target}] − lr · ∂L/∂E[{target}]")
    print(format_table(np.stack([old_row, model.E.grad[TARGET_ID], model.E.numpy()[TARGET_ID]]),
                       [f"E[{target}] before", f"∂L/∂E[{target}]", f"E[{target}] after"], dims))
    print(f"  logit({target}) = h · E[{target}] for the same last hidden state h: "
          f"{fixed(old_logit)} → {fixed(new_logit)}")
    print(f"  the whole forward again, every parameter stepped but γ and β (fixed, as in the article): "
          f"{fixed(without_layer_norm_step)}")
    _article(f"γ and β are fixed there; here they are trained too, and with their step the whole forward gives "
             f"{fixed(recomputed)} ({_signed(recomputed - without_layer_norm_step)})")


if __name__ == "__main__":
    main()
