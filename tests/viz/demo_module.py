"""A stand-in model module for the viz tests: `demo_loss()` as every models.* module defines it.

A one-block toy language model written with autograd ops only (no nn), so the
viz tests do not depend on the models being written elsewhere. It has what
the pictures must handle: an embedding (scatter-add), a matmul, a softmax, a
constant scale, a residual add (a tensor used twice), a fused layer norm with
a broadcast bias, an LM head tied to the embedding (a leaf used twice), and a
fused cross-entropy. Ops are tagged with module scopes the way nn will tag
them, and the parameters are named the way nn will name them.
"""
import numpy as np

import autograd as ag
from autograd import Tensor

VOCAB, WIDTH = 6, 4
IDS = [[0, 1, 2], [3, 4, 5]]
TARGETS = [[1, 2, 3], [4, 5, 0]]
SCOPES = ("wte", "block.attn", "block", "block.ln", "lm_head")


def parameters(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)

    def param(name, *shape, scale=0.5):
        t = Tensor((rng.standard_normal(shape) * scale).astype(dtype), requires_grad=True)
        t.name = name
        return t

    return {
        "wte.weight": param("wte.weight", VOCAB, WIDTH),
        "block.attn.weight": param("block.attn.weight", WIDTH, WIDTH),
        "block.ln.weight": param("block.ln.weight", WIDTH, scale=0.1),
        "block.ln.bias": param("block.ln.bias", WIDTH, scale=0.1),
    }


def demo_loss(params=None):
    """The mean next-token cross-entropy of a 2×3 batch (deterministic)."""
    p = params or parameters()
    with ag.name_scope("wte"):
        x = ag.embedding(p["wte.weight"], IDS)
    x.name = "x"
    with ag.name_scope("block"):
        with ag.name_scope("block.attn"):
            h = x @ p["block.attn.weight"]
            a = ag.softmax(h) * 0.5
        x = x + a
        with ag.name_scope("block.ln"):
            x = ag.layer_norm(x, p["block.ln.weight"] + 1.0, p["block.ln.bias"])
    with ag.name_scope("lm_head"):
        logits = x @ p["wte.weight"].T
    logits.name = "logits"
    loss = ag.cross_entropy(logits, TARGETS)
    loss.name = "loss"
    return loss
