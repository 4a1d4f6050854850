"""GPT-2 in PyTorch as nanoGPT writes it: the reference model the benchmarks time our engine against.

The same architecture as models.gpt2 (pre-LN blocks, fused Q/K/V, tanh GELU,
LM head tied to the token embedding, GPT-2's initialisation), Linear weights
stored (in, out) like GPT-2's Conv1D and our nn.Linear, and a key/value cache
for generation that, like ours, is rebuilt when the window slides past
block_size. It imports PyTorch only: a peer process never loads our engine.
"""
import math

import torch
import torch.nn.functional as F


class Linear(torch.nn.Module):
    """y = x @ W + b with W of shape (in, out), one addmm."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(n_in, n_out))
        self.bias = torch.nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)


class Block(torch.nn.Module):
    def __init__(self, n_head, n_embd, dropout=0.0):
        super().__init__()
        self.n_head, self.dropout = n_head, dropout
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(n_embd), torch.nn.LayerNorm(n_embd)
        self.attn = torch.nn.Module()
        self.attn.c_attn, self.attn.c_proj = Linear(n_embd, 3 * n_embd), Linear(n_embd, n_embd)
        self.mlp = torch.nn.Module()
        self.mlp.c_fc, self.mlp.c_proj = Linear(n_embd, 4 * n_embd), Linear(4 * n_embd, n_embd)

    def forward(self, x, cache=None):
        B, T, C = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        if cache is not None:
            k, v = cache.append(k, v)  # every position so far
        # one new query sees every cached key; a prefill is causal from the cache's start
        p = self.dropout if self.training else 0.0  # nanoGPT's: on attention weights and both residual branches
        y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1, dropout_p=p)
        x = x + F.dropout(self.attn.c_proj(y.transpose(1, 2).reshape(B, T, C)), p, self.training)
        return x + F.dropout(self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh")), p, self.training)


class LayerCache:
    """One layer's keys and values in preallocated (B, nh, block_size, hs) buffers."""

    def __init__(self, shape, device):
        self.keys, self.values, self.length = torch.zeros(shape, device=device), torch.zeros(shape, device=device), 0

    def append(self, k, v):
        end = self.length + k.shape[2]
        self.keys[:, :, self.length:end] = k
        self.values[:, :, self.length:end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]


class GPT(torch.nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout=0.0):
        super().__init__()
        self.block_size, self.n_head, self.n_embd, self.dropout = block_size, n_head, n_embd, dropout
        self.transformer = torch.nn.Module()
        self.transformer.wte = torch.nn.Embedding(vocab_size, n_embd)
        self.transformer.wpe = torch.nn.Embedding(block_size, n_embd)
        self.transformer.h = torch.nn.ModuleList(Block(n_head, n_embd, dropout) for _ in range(n_layer))
        self.transformer.ln_f = torch.nn.LayerNorm(n_embd)
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.ndim == 2:  # weights and embeddings; biases 0, LayerNorm scales 1
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                torch.nn.init.normal_(p, std=std)

    def forward(self, idx, targets=None, caches=None, last_only=False):
        """logits (B, T, V) and the mean cross-entropy against `targets` (None without)."""
        t = self.transformer
        start = caches[0].length if caches is not None else 0
        x = F.dropout(t.wte(idx) + t.wpe(torch.arange(start, start + idx.shape[1], device=idx.device)), self.dropout,
                      self.training)
        for i, block in enumerate(t.h):
            x = block(x, caches[i] if caches is not None else None)
        x = t.ln_f(x)
        if last_only:
            x = x[:, -1:]
        logits = x @ t.wte.weight.T
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        return logits, loss

    def optimizer(self, lr, betas, weight_decay):
        """AdamW as nanoGPT groups it: weight decay on the 2-D weights only."""
        params = list(self.parameters())
        return torch.optim.AdamW([{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
                                  {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
                                 lr=lr, betas=betas)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True):
        """Greedy at temperature 0, else sampled (top_k); the cache is rebuilt whenever the window slides."""
        B = idx.shape[0]
        shape = (B, self.n_head, self.block_size, self.n_embd // self.n_head)
        caches, cache_start = None, 0
        for _ in range(max_new_tokens):
            n = idx.shape[1]
            start = max(0, n - self.block_size)
            if not use_cache:
                window = idx[:, start:]
            elif caches is not None and start == cache_start:
                window = idx[:, -1:]
            else:  # first step, or the window slid: prefill again
                caches = [LayerCache(shape, idx.device) for _ in self.transformer.h]
                cache_start, window = start, idx[:, start:]
            logits, _ = self(window, caches=caches if use_cache else None, last_only=True)
            logits = logits[:, -1]
            if temperature == 0:
                new = logits.argmax(-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    logits[logits < torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]] = -math.inf
                new = torch.multinomial(F.softmax(logits, dim=-1), 1)
            idx = torch.cat([idx, new], dim=1)
        return idx
