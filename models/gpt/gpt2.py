"""GPT-2 on this project's autograd engine, read top to bottom: config, layers, model, generate.

What this file promises:

* `GPTConfig` and `GPT`: OpenAI's GPT-2 (pre-LN blocks, fused Q/K/V, tanh GELU,
  LM head tied to the token embedding), parameters named and stored as GPT-2's
  checkpoints (`transformer.h.0.attn.c_attn.weight`, weights (in, out)).
* `model(idx, targets=None) -> (logits, loss)`: logits (B, T, V) for every
  position; the mean cross-entropy against targets (-1 = ignored), else None.
* `model.generate(...)`: greedy, temperature, top-k and top-p sampling with a
  key/value cache, seeded by `autograd.manual_seed` (the token choice is in
  models/gpt/sampling.py); cached and uncached
  decoding give the same tokens, also past block_size. On "cuda" the tokens
  within block_size come from models/gpt/decode.py's static cache, one CUDA
  graph launch per token.
* `GPT.from_pretrained(folder)` / `model.save_pretrained(folder)`: Hugging
  Face's folder format (in models/gpt/hf_checkpoint.py), which transformers reads;
  `GPTConfig.from_pretrained(folder)` its config alone, no weight read.
* `demo_loss()`: a tiny GPT's deterministic loss, for viz.
* The intermediates have the names the code reads, given by nn.Module (the
  model names nothing itself): a module's output, `transformer.h.0.ln_1(x)`,
  the residual stream after each block, `transformer.h.0(x)`; a forward's
  variables, `transformer.h.0.attn.q`, `….attn.y`, `transformer.h.0.x` (the
  stream after attention), `logits`. viz draws and traces them by these names.

Shapes: B batch, T time, C = n_embd, nh heads of hs = C / nh features, V = vocab_size.
"""
import math
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

import autograd as ag
import nn
from autograd import Tensor, backend
from models.gpt import decode, hf_checkpoint, sampling


@dataclass
class GPTConfig:
    """GPT-2's hyper-parameters; the defaults are GPT-2 small (124M)."""

    vocab_size: int = 50257  # 50,000 BPE merges + 256 bytes + <|endoftext|>
    block_size: int = 1024  # the longest context, the rows of the position table
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0  # on embeddings, attention weights and both residual branches
    bias: bool = True  # biases in the Linears and LayerNorms, as GPT-2 has them
    layer_norm_epsilon: float = 1e-5
    # wte's rows: vocab_size rounded up to a multiple of this (64 on a GPU: GPT-2's 50,257 → 50,304, so the LM
    # head's GEMMs tile evenly). The padding rows are never a token: no probability, no gradient, not saved.
    pad_vocab_to: int = 1

    @property
    def padded_vocab_size(self):
        return -(-self.vocab_size // self.pad_vocab_to) * self.pad_vocab_to

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "pad_vocab_to"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"GPTConfig: {name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head:
            raise ValueError(
                f"GPTConfig: n_embd={self.n_embd} is not divisible by n_head={self.n_head}; every head "
                f"gets n_embd // n_head features, so choose n_embd a multiple of n_head")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"GPTConfig: dropout must be in [0, 1), got {self.dropout}")
        eps = self.layer_norm_epsilon
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < math.inf:
            raise ValueError(f"GPTConfig: layer_norm_epsilon must be a positive number, got {eps!r}")
        if not isinstance(self.bias, bool):
            raise ValueError(f"GPTConfig: bias must be True or False, got {self.bias!r}")

    def num_parameters(self):
        """How many parameters GPT(self) has, counted without building it (an absurd size costs nothing); wte's
        padding rows (pad_vocab_to) are not counted."""
        C = self.n_embd
        per_block = 12 * C * C + 2 * C + (9 * C + 2 * C if self.bias else 0)  # weights, LN scales, biases
        return (self.vocab_size + self.block_size) * C + self.n_layer * per_block + C + (C if self.bias else 0)

    @classmethod
    def from_pretrained(cls, directory, dropout=0.0):
        """The config of the Hugging Face folder `directory`, from its config.json alone (hf_checkpoint.read_config):
        the model GPT.from_pretrained builds, known before a weight is read."""
        fields = hf_checkpoint.read_config(directory)
        try:
            return cls(**fields, dropout=dropout)
        except ValueError as exc:
            raise ValueError(f"{Path(directory) / 'config.json'}: {exc}") from None


# The attribute names of a block's nn.Linears, what nn.lora(model, …, targets) may name; the smaller side of
# each is n_embd, which bounds an adapter's rank
LINEAR_LAYERS = ("c_attn", "c_proj", "c_fc")


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position sees itself and the positions before it."""

    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # x → [q | k | v]
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = config.dropout  # a probability: sdpa drops attention weights itself
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x, cache=None):
        B, T, C = x.shape
        nh, hs = self.n_head, C // self.n_head
        fused = self.c_attn(x)  # (B, T, 3C)
        qkv = fused.reshape(B, T, 3, nh, hs)  # q, k and v of each position, each cut into nh heads
        by_head = qkv.transpose(2, 0, 3, 1, 4)  # (3, B, nh, T, hs): [q | k | v]
        q, k, v = by_head[0], by_head[1], by_head[2]  # (B, nh, T, hs) each
        if cache is not None:
            k, v = cache.append(k, v)  # (B, nh, T_seen + T, hs): every position so far
        # With fewer queries than keys, sdpa lines the queries up with the *last* keys.
        y = ag.scaled_dot_product_attention(q, k, v, causal=True,
                                            dropout_p=self.attn_dropout if self.training else 0.0)  # (B, nh, T, hs)
        by_position = y.transpose(0, 2, 1, 3)  # (B, T, nh, hs)
        joined = by_position.reshape(B, T, C)  # (B, T, C): the heads side by side again
        out = self.c_proj(joined)
        return self.resid_dropout(out)


class MLP(nn.Module):
    """Position-wise feed-forward: C → 4C, GELU (tanh approximation), 4C → C."""

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        fc = self.c_fc(x)  # (B, T, 4C)
        gelu = fc.gelu()
        out = self.c_proj(gelu)  # (B, T, C)
        return self.dropout(out)


class Block(nn.Module):
    """Pre-LN: each branch reads a normalised copy and adds into the untouched residual stream."""

    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, cache=None):
        ln_1 = self.ln_1(x)
        attn = self.attn(ln_1, cache=cache)
        x = x + attn  # the residual stream, attention's contribution added
        ln_2 = self.ln_2(x)
        mlp = self.mlp(ln_2)
        return x + mlp


class Transformer(nn.Module):
    """Token + position embeddings, the blocks, the final LayerNorm: ids (B, T) → features (B, T, C)."""

    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.padded_vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)
        self.checkpoint_blocks = False  # activation checkpointing: keep each block's input alone (models.train)

    def forward(self, idx, kv_cache=None):
        T = idx.shape[1]
        start = kv_cache.length if kv_cache is not None else 0  # the first new token's position
        pos = ag.arange(start, start + T, device=self.wpe.weight.device)  # (T,)
        tok_emb, pos_emb = self.wte(idx), self.wpe(pos)
        emb = tok_emb + pos_emb  # (B, T, C) + (T, C) → (B, T, C)
        x = self.drop(emb)  # the residual stream starts here
        for i, block in enumerate(self.h):
            if self.checkpoint_blocks and kv_cache is None and ag.is_grad_enabled():
                trained = [p for p in block.parameters() if p.requires_grad]  # LoRA's adapters, in a frozen model
                x = ag.checkpoint(block, x, params=trained)  # its activations recomputed in backward, not kept
            else:
                x = block(x, cache=kv_cache.layers[i] if kv_cache is not None else None)
        out = self.ln_f(x)  # (B, T, C)
        return out


class LayerCache:
    """One layer's keys and values so far, in preallocated (B, nh, block_size, hs) buffers.

    Plain arrays, outside the autograd graph: generation runs under no_grad, and
    writing in place avoids a concatenation (a full copy) per new token.
    """

    def __init__(self, shape, dtype, device):
        self.keys = ag.zeros(shape, dtype=dtype, device=device).data
        self.values = ag.zeros(shape, dtype=dtype, device=device).data
        self.length = 0

    def append(self, k, v):
        """Store the new (B, nh, T, hs) keys and values; return all of them so far."""
        end = self.length + k.shape[2]
        if end > self.keys.shape[2]:
            raise ValueError(f"KV cache: {end} positions do not fit a cache of block_size {self.keys.shape[2]}; "
                             "start again from the last block_size tokens")
        self.keys[:, :, self.length:end] = k.data
        self.values[:, :, self.length:end] = v.data
        self.length = end
        return Tensor(self.keys[:, :, :end]), Tensor(self.values[:, :, :end])


class KVCache:
    """A LayerCache per block; `length` positions (0 … length−1) are cached."""

    def __init__(self, config, batch_size, dtype, device):
        self.batch_size = batch_size
        shape = (batch_size, config.n_head, config.block_size, config.n_embd // config.n_head)
        self.layers = [LayerCache(shape, dtype, device) for _ in range(config.n_layer)]

    @property
    def length(self):
        return self.layers[0].length

    def reset(self):
        for layer in self.layers:
            layer.length = 0


class GPT(nn.Module):
    """GPT-2: `Transformer` features, then logits = features @ wteᵀ (the LM head is the embedding)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = Transformer(config)
        self._init_weights()

    def _init_weights(self):
        """GPT-2's initialisation from autograd's seeded generator: weights ~ N(0, 0.02²), biases 0, LN scales 1.

        The residual projections (c_proj) get std 0.02/√(2·n_layer): each block adds two branches
        into the residual stream, and this keeps its variance from growing with depth.
        """
        resid_std = 0.02 / math.sqrt(2 * self.config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                p.data[...] = 0
            elif ".ln_" in name:
                p.data[...] = 1
            else:
                std = resid_std if name.endswith("c_proj.weight") else 0.02
                rows = self.config.vocab_size if name == "transformer.wte.weight" else p.shape[0]
                p.data[...] = 0  # the padding rows of wte stay 0, as they never score a real token
                p.data[:rows] = (ag.randn(rows, *p.shape[1:], dtype=p.dtype) * std).data

    def forward(self, idx, targets=None, kv_cache=None, last_only=False, return_logits=True):
        """logits (B, T, V) for ids `idx` (B, T); loss = mean cross-entropy against `targets` (−1 = ignore).

        With a `kv_cache` (inference only), `idx` continues the cached positions.
        `last_only` computes the last position's logits alone, (B, 1, V): all
        that generation needs, and the LM head is the largest matmul.
        `return_logits=False` (a training step's) returns (None, loss): on a
        GPU the loss's kernel then writes its gradient over the logits.
        With a padded vocabulary the LM head scores every row of wte and the
        loss and logits cover the real vocab_size columns alone.
        """
        idx = self._check_ids(idx, kv_cache)
        x = self.transformer(idx, kv_cache)  # (B, T, C)
        if last_only and x.shape[1] > 1:  # a cached step's one position is already the last
            x = x[:, -1:, :]  # (B, 1, C)
        with ag.name_scope("lm_head"):  # scores against every token embedding, x @ wteᵀ: one GEMM over all B·T rows
            B, T, C = x.shape
            wte = self.transformer.wte.weight
            rows, wte_t = x.reshape(B * T, C), wte.T  # (B·T, C), (C, padded V)
            row_scores = rows @ wte_t  # (B·T, padded V)
            scores = row_scores.reshape(B, T, wte.shape[0])  # (B, T, padded V)
        V = self.config.vocab_size
        loss = None
        if targets is not None:
            loss = ag.cross_entropy(scores, targets, ignore_index=-1, classes=V, reuse_logits=not return_logits)
        if not return_logits:
            return None, loss
        logits = scores if scores.shape[-1] == V else scores[..., :V]  # (B, T, V)
        return logits, loss

    def pad_vocab(self, multiple):
        """Pad wte with zero rows to a multiple of `multiple` (GPTConfig.pad_vocab_to), in place; returns self.

        The same Parameter keeps its handle; a model loaded from a checkpoint (always vocab_size rows) is
        padded this way before training on a GPU.
        """
        config = replace(self.config, pad_vocab_to=multiple)  # checks `multiple`
        wte = self.transformer.wte
        if wte.weight.shape[0] == config.padded_vocab_size:
            self.config = config
            return self
        real = wte.weight.data[:config.vocab_size]
        padding = ag.zeros(config.padded_vocab_size - config.vocab_size, config.n_embd, dtype=real.dtype,
                           device=wte.weight.device).data
        wte.weight.data = backend.xp_for(wte.weight.device).concatenate([real, padding])
        wte.weight.grad = None
        wte.num_embeddings = config.padded_vocab_size
        self.config = config
        return self

    def _check_ids(self, idx, kv_cache=None):
        """`idx` as a Tensor of token ids (B, T) that fits the context, or a one-line error saying why not."""
        idx = idx if isinstance(idx, Tensor) else Tensor(idx)  # a list, or a NumPy or CuPy array where it lives
        if idx.dtype.kind not in "iu":
            raise TypeError(f"GPT: idx must hold integer token ids, got dtype {idx.dtype}; "
                            "pass ints (e.g. np.int64), not floats")
        if idx.ndim != 2:
            raise ValueError(f"GPT: idx must have shape (B, T), got {idx.shape}; "
                             "add a batch axis for one sequence (idx[None])")
        seen = kv_cache.length if kv_cache is not None else 0
        if idx.shape[1] == 0 or seen + idx.shape[1] > self.config.block_size:
            raise ValueError(
                f"GPT: cannot run a sequence of {idx.shape[1]} tokens"
                + (f" after {seen} cached ones" if seen else "")
                + f"; the model's block_size is {self.config.block_size}: crop to the last "
                  f"{self.config.block_size} tokens (generate does this)")
        # refused here: layer 0 would store keys broadcast to the cache's batch before attention failed
        if kv_cache is not None and kv_cache.batch_size != idx.shape[0]:
            raise ValueError(f"GPT: idx is a batch of {idx.shape[0]}, and the KV cache was made for a batch of "
                             f"{kv_cache.batch_size}; make a KVCache for a batch of {idx.shape[0]}")
        if kv_cache is not None and ag.is_grad_enabled():
            raise RuntimeError("GPT: the KV cache is for inference (it is outside the graph); "
                               "run under autograd.no_grad()")
        return idx

    def optimizer_groups(self, weight_decay):
        """AdamW groups as nanoGPT makes them: decay the 2-D weights (matmuls, embeddings), not biases or LayerNorms."""
        params = [p for p in self.parameters() if p.requires_grad]  # frozen ones (a LoRA's base) have no moments
        return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
                {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]

    def crop_block_size(self, block_size):
        """Shrink the context to `block_size` (e.g. fine-tuning GPT-2 on shorter blocks): keep wpe's first rows."""
        if not 0 < block_size <= self.config.block_size:
            raise ValueError(f"crop_block_size: block_size must be in [1, {self.config.block_size}], got {block_size}")
        wpe = self.transformer.wpe
        wpe.weight.data = wpe.weight.data[:block_size].copy()  # the same Parameter: optimizers keep their handle
        wpe.weight.grad = None
        wpe.num_embeddings = block_size
        self.config = replace(self.config, block_size=block_size)  # a new config: the old one may be shared
        return self

    @ag.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None, use_cache=True):
        """Extend each row of `idx` by `max_new_tokens` tokens; returns prompt + new tokens like `idx`.

        `idx` is (B, T) or (T,) token ids as a list, ndarray or Tensor; the result
        has the same type. temperature=0 or top_k=1 is greedy decoding. Random
        draws come from autograd's generator of the model's device, so
        `autograd.manual_seed` makes sampling reproducible, for one decode path (the static one draws from a
        Philox counter, the dynamic one from the generator's stream: the same seed samples other tokens; greedy
        tokens are the same). With `use_cache`, the prompt is run once (prefill)
        and then one token per step, reusing every layer's keys and values. Past
        block_size the window slides, every position shifts, and the cache is
        rebuilt from the cropped window, which keeps the result identical to
        `use_cache=False`. On "cuda" the tokens within block_size come from a
        static cache whose decode step is replayed as a CUDA graph
        (models/gpt/decode.py; GPT_DECODE chooses the path on any device).
        Logits holding NaN or inf leave no token to draw: a ValueError names the first such token and why.
        """
        sampling.check_arguments(max_new_tokens, temperature, top_k, top_p)
        ids, give_back = sampling.as_batch(idx, self.config.vocab_size)
        B, T = ids.shape
        sampling.check_fits_memory(B, T + max_new_tokens)
        self._check_ids(ids[:, -self.config.block_size:])
        wte = self.transformer.wte.weight
        out = ag.zeros(B, T + max_new_tokens, dtype=np.int64, device=wte.device)  # no copy to the host per token
        tokens = out.data
        tokens[:, :T] = Tensor(ids, device=wte.device).data

        def make_cache(batch):
            return KVCache(self.config, batch, wte.dtype, wte.device)
        # made when the loop below first needs it: the static path keeps a cache of its own, and on "cuda" a second
        # one at block_size (zeroed, B·n_layer·2·block_size·n_embd values) would only take memory
        cache = None
        cache_start = 0  # the token whose keys sit at cache position 0
        # NO_TOKEN (logits with NaN or inf) is refused before a step embeds it: the embedding refuses an id outside
        # wte (a wait for the device each dynamic step already). The static path's graph never waits: its kernel
        # feeds id 0 on, and its tokens are looked at once, when it is done.
        was_training = self.training
        self.eval()
        try:
            first = T
            # an empty batch has no row to launch a decode kernel's blocks for (CUDA refuses a grid of none)
            if use_cache and max_new_tokens and B and T <= self.config.block_size and self._static_decoding():
                first = decode.run(self, tokens, T, T + max_new_tokens, temperature, top_k, top_p, make_cache)
                if (tokens[:, T:first] == sampling.NO_TOKEN).any():  # one look, once its graph has run
                    self._refuse_no_token(backend.to_host(tokens), T, T, first)
            for n in range(first, T + max_new_tokens):  # the dynamic cache: all of it, or past block_size
                start = max(0, n - self.config.block_size)  # the window the model sees: tokens[:, start:n]
                if not use_cache:
                    window = tokens[:, start:n]
                elif cache is not None and start == cache_start and cache.length == n - 1 - start:
                    window = tokens[:, n - 1:n]  # only the newest token; the cache holds the rest
                else:  # first step, or the window slid: every position changed, so prefill again
                    if cache is None:
                        cache = make_cache(B)
                    cache.reset()
                    cache_start, window = start, tokens[:, start:n]
                logits, _ = self(window, kv_cache=cache, last_only=True)  # (B, 1, V)
                tokens[:, n] = sampling.sample(logits.data[:, -1], temperature, top_k, top_p)
                if (tokens[:, n] == sampling.NO_TOKEN).any():
                    self._refuse_no_token(backend.to_host(tokens), T, n, n + 1)
        finally:
            self.train(was_training)
        return give_back(out.numpy())

    def _refuse_no_token(self, ids, T, start, stop):
        """A one-line error if the host array ids[:, start:stop] (after a prompt of T tokens) holds NO_TOKEN: it names
        the first such token and why its logits held NaN or inf, weights that are not finite or a forward that
        overflowed finite ones (looking costs a pass over the weights, and only then)."""
        rows, columns = np.nonzero(ids[:, start:stop] == sampling.NO_TOKEN)
        if not len(columns):
            return
        n = start + columns.min()
        row = f" of row {rows[columns.argmin()]}" if len(ids) > 1 else ""
        broken = [(name, int((~np.isfinite(p.numpy())).sum())) for name, p in self.named_parameters()]
        broken = [(name, count) for name, count in broken if count]
        if broken:
            more = f" (and {len(broken) - 1} more parameters)" if len(broken) > 1 else ""
            why = (f"{broken[0][0]} holds {broken[0][1]:,} NaN or inf values{more}: the weights are damaged, as a "
                   "diverged run leaves them")
        else:
            largest = max(float(np.abs(p.numpy()).max()) for p in self.parameters())
            why = (f"the weights are finite but as large as {largest:.3g}, and the forward overflowed "
                   f"{self.transformer.wte.weight.dtype} with them, as a diverged run leaves them")
        raise ValueError(f"generate: the logits for new token {n - T + 1} (position {n}{row}) hold NaN or inf, so no "
                         f"token can be drawn: {why}; load another checkpoint (docs/debugging.md: "
                         "--detect-anomaly and --health-interval show where a run goes wrong)")

    def _static_decoding(self):
        """Whether generate hands the tokens within block_size to models/gpt/decode.py (see decode.mode)."""
        if decode.mode(self.transformer.wte.weight.device) == "dynamic":
            return False
        if not decode.supports(self):
            warnings.warn("generate: the static decode path computes plain GPT-2 layers in float32 or float64, "
                          "one dtype for every weight (no LoRA adapters, heads of at most 256 features); using the "
                          "dynamic KV cache",
                          RuntimeWarning, stacklevel=3)
            return False
        return True

    @classmethod
    def from_pretrained(cls, directory, dropout=0.0):
        """Load a Hugging Face GPT-2 folder (config.json, model.safetensors) in either layout (hf_checkpoint.read)."""
        config = GPTConfig.from_pretrained(directory, dropout)
        weights = hf_checkpoint.read(directory)
        # Every parameter is one of the weights, so a model far larger than they are is refused before it is built:
        # a few MB of zero-size layer tensors, or one wide wte row, would otherwise ask for terabytes. (A model a
        # few tensors short is built, to name them below; twice the weights bounds what building it costs.)
        held = sum(array.size for array in weights.values())
        if config.num_parameters() > 2 * held:
            raise ValueError(f"{Path(directory) / 'config.json'} describes a model of {config.num_parameters():,} "
                             f"parameters, more than twice the {held:,} values of the weights beside it, where a "
                             "GPT-2 folder's weights hold every parameter of its model: save or download it again")
        with ag.seeded(0):  # its random initialisation is overwritten at once; the caller's streams stay as they were
            model = cls(config)
        shapes = {name: p.shape for name, p in model.named_parameters()}
        flipped = sorted(name for name, array in weights.items()
                         if name in shapes and array.shape != shapes[name] and array.shape[::-1] == shapes[name])
        if flipped:  # "mis-shaped keys; check the config" would send the user to the wrong file
            more = f" (and {len(flipped) - 1} more)" if len(flipped) > 1 else ""
            raise ValueError(f"GPT.from_pretrained: the weights in {directory} hold {flipped[0]} as "
                             f"{weights[flipped[0]].shape}, the transpose of GPT-2's {shapes[flipped[0]]}{more}: they "
                             "were saved (out, in), as PyTorch's nn.Linear keeps them (a nanoGPT state dict, say), "
                             "where GPT-2's checkpoints hold (in, out); transpose every Linear's weight "
                             "(attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) before saving")
        missing = [name for name in shapes if name not in weights]
        unexpected = [name for name in weights if name not in shapes]
        if missing or unexpected:  # load_state_dict's fix, strict=False, is no argument of from_pretrained
            found = [f"missing keys {missing}"] * bool(missing) + [f"unexpected keys {unexpected}"] * bool(unexpected)
            raise ValueError(f"GPT.from_pretrained: the weights in {directory} do not fit its config.json ({config}): "
                             + ", ".join(found) + "; a GPT-2 folder holds every parameter of the model its config.json "
                             "describes and no other tensor (config.json says \"bias\": false for a model without "
                             "biases): save or download the folder again")
        try:
            model.load_state_dict(weights)
        except KeyError as exc:  # load_state_dict names the mis-shaped keys; say which folder they came from
            raise ValueError(f"GPT.from_pretrained: the weights in {directory} do not fit its config.json "
                             f"({config}): {exc.args[0]}") from None
        return model

    def save_pretrained(self, directory):
        """Write config.json and model.safetensors as transformers does, each file atomically (hf_checkpoint.save).

        Its weights are plain_weights(). (A run's checkpoint keeps its adapters alone, in adapters.safetensors:
        models/training/checkpoint.py.)
        """
        hf_checkpoint.save(self, directory, self.plain_weights())

    def plain_weights(self):
        """{name: NumPy array} under GPT-2's own keys, a LoRA layer (nn.lora) as the one weight W + ΔW that computes
        it: GPT-2 has no adapter keys, and transformers would drop them unused and give the base's logits."""
        weights = {name: p.numpy() for name, p in self.named_parameters()}
        for name, module in self.named_modules():
            if isinstance(module, nn.LoRALinear):
                del weights[f"{name}.lora_A"], weights[f"{name}.lora_B"]
                weights[f"{name}.weight"] = backend.to_host(module.merged_weight())
        return weights


def demo_loss():
    """A tiny GPT's loss on a fixed batch: deterministic, small enough to draw (`python -m viz.graph models.gpt2`)."""
    with ag.seeded(0):  # the same weights whatever the caller seeded, and the caller's streams untouched
        model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=8))
    tokens = np.array([[3, 1, 4, 1, 5, 9, 2, 6, 5],
                       [2, 7, 1, 8, 2, 8, 1, 8, 2]])
    _, loss = model(tokens[:, :-1], targets=tokens[:, 1:])  # predict each next token
    return loss

