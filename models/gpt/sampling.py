"""Choosing the next token: greedy, temperature, top-k and top-p, as GPT.generate uses them.

`sample` works on the raw logits array where the model left it (NumPy or CuPy),
so a GPU run never copies logits to the host per token (a row of logits with
NaN or inf gets NO_TOKEN, for generate to refuse). `top_k_mask` and
`top_p_mask` are its two filters, the one copy of each (the tiny lesson's
tables use them too). `check_arguments` vets generate's options before any
work; `as_batch` turns the prompt a user passes (list, ndarray or Tensor) into
a (B, T) batch and back.
"""
import math

import numpy as np

import autograd as ag
from autograd import Tensor, backend
from models.cli import machine_memory

NO_TOKEN = -1  # sample's (and the decode kernel's) id for a row whose logits leave nothing to draw from


def top_k_mask(logits, k):
    """True where a logit is among the k highest of its row (last axis); ties with the k-th highest all stay.

    `logits` is a NumPy or CuPy array of any leading shape; the mask is on its device.
    """
    xp = backend.xp_for(backend.device_of(logits) or "cpu")
    kth = xp.partition(logits, -k, axis=-1)[..., -k, None]  # (..., 1): the k-th largest
    return logits >= kth


def top_p_mask(probs, top_p):
    """True for the smallest set of most likely tokens of each row (last axis) whose probability reaches top_p.

    A token stays while the mass of the likelier ones before it is below top_p,
    so the most likely token always stays; ties are ordered by id, as argmax
    orders them. `probs` is a NumPy or CuPy array; the mask is on its device.
    """
    xp = backend.xp_for(backend.device_of(probs) or "cpu")
    order = xp.argsort(-probs, axis=-1, kind="stable")  # most likely first
    sorted_probs = xp.take_along_axis(probs, order, axis=-1)
    # the exclusive running sum, shifted rather than cumsum - p: that difference rounds, so that with
    # probs (0.4, 0.3, ...) and top_p = 0.4 the second token's mass before read 0.39999999999999997 and it stayed
    mass_before = xp.zeros_like(sorted_probs)
    mass_before[..., 1:] = xp.cumsum(sorted_probs, axis=-1)[..., :-1]
    keep = xp.empty_like(probs, dtype=bool)
    xp.put_along_axis(keep, order, mass_before < top_p, axis=-1)  # back to vocabulary order
    return keep


def sample(logits, temperature=1.0, top_k=None, top_p=None):
    """One token id per row of `logits` (B, V): greedy, or drawn from the filtered softmax; NO_TOKEN for a row
    with no distribution to draw from (a NaN or +inf logit, or none above -inf), for the caller to refuse.

    Order as in transformers: divide by the temperature, keep the top_k highest
    logits, then keep the smallest set of most likely tokens whose probability
    reaches top_p (the most likely token always stays). Draws one uniform
    number per row from autograd's generator of the device `logits` live on,
    and stays there: on a GPU nothing is copied back to the host.
    """
    device = backend.device_of(logits) or "cpu"
    xp = backend.xp_for(device)
    logits = xp.asarray(logits, dtype=xp.float64)
    top = logits.max(axis=-1, keepdims=True)  # (B, 1): NaN where the row holds one
    usable = xp.isfinite(top[:, 0])
    if temperature == 0 or top_k == 1:
        return xp.where(usable, logits.argmax(axis=-1), NO_TOKEN)
    # Each row's largest logit is taken off before the division: logits / 1e-320 would overflow to ±inf (and
    # inf - inf is NaN), while (logits - max) / T only runs to -inf, so that a tiny temperature is its limit,
    # greedy (ties shared). The most likely token then has logit 0, which top-k never masks.
    with np.errstate(over="ignore", invalid="ignore"):  # running to -inf is meant; a NO_TOKEN row's NaNs too
        logits = (logits - top) / temperature
        if top_k is not None and top_k < logits.shape[-1]:
            logits = xp.where(top_k_mask(logits, top_k), logits, -xp.inf)
        probs = xp.exp(logits)
        probs /= probs.sum(axis=-1, keepdims=True)  # (B, V)
    if top_p is not None and top_p < 1:
        probs = xp.where(top_p_mask(probs, top_p), probs, 0.0)
    cdf = xp.cumsum(probs, axis=-1)  # (B, V)
    u = ag.rand(len(cdf), dtype=np.float64, device=device).data * cdf[:, -1]  # (B,): uniform in [0, total mass)
    picks = (cdf <= u[:, None]).sum(axis=-1)  # the first index whose cumulative mass passes u
    return xp.where(usable, xp.minimum(picks, cdf.shape[-1] - 1), NO_TOKEN)


def check_arguments(max_new_tokens, temperature, top_k, top_p):
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
        raise ValueError(f"generate: max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    real = (int, float, np.integer, np.floating)
    if isinstance(temperature, bool) or not isinstance(temperature, real) or not 0 <= temperature < math.inf:
        raise ValueError(f"generate: temperature must be a finite number >= 0 (0 is greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1):
        raise ValueError(f"generate: top_k must be a positive integer or None, got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, real) or not 0 < top_p <= 1):
        raise ValueError(f"generate: top_p must be a number in (0, 1] or None, got {top_p!r}")


def check_fits_memory(rows, length, what="generate: max_new_tokens", available=None):
    """A one-line error, before any work, unless `rows` sequences of `length` token ids (int64, as generate's
    output holds them) fit in this machine's memory; `what` names the option that asked for them."""
    available = machine_memory() if available is None else available
    need = 8 * rows * length
    if available is not None and need > available:
        raise ValueError(f"{what} asks for {rows:,} x {length:,} token ids, {need / 2 ** 30:,.1f} GiB, more than "
                         f"this machine's {available / 2 ** 30:,.1f} GiB of memory; ask for fewer")


def as_batch(idx, vocab_size):
    """`idx` as a (B, T) int64 host array, and a function that turns the output back into idx's kind (and dtype,
    which must hold every id below `vocab_size`: a uint8 prompt would get new ids wrapped modulo 256).

    Every id must be a token, 0 to vocab_size - 1: the embedding alone would pass a padded vocabulary's rows
    (pad_vocab) and never sees the ids before the last block_size, which generate hands back as they came.
    """
    if isinstance(idx, Tensor):
        device = idx.device
        ids = idx.numpy()
        back = lambda out: Tensor((out if ids.ndim == 2 else out[0]).astype(ids.dtype), device=device)  # noqa: E731
    elif isinstance(idx, np.ndarray):
        ids = idx
        back = lambda out: (out if ids.ndim == 2 else out[0]).astype(ids.dtype)  # noqa: E731
    else:
        try:
            ids = np.asarray(idx)
        except ValueError:  # NumPy's "inhomogeneous shape"
            lengths = sorted({len(row) for row in idx if hasattr(row, "__len__")})
            raise ValueError(f"generate: the prompts of a batch must have one length, got lengths {lengths}; pad "
                             "them to one length, or generate for each prompt on its own") from None
        back = lambda out: (out if ids.ndim == 2 else out[0]).tolist()  # noqa: E731
    if ids.dtype.kind not in "iu" or ids.ndim not in (1, 2) or ids.shape[-1] == 0:
        raise ValueError(f"generate: idx must be non-empty integer token ids of shape (B, T) or (T,), "
                         f"got dtype {ids.dtype} and shape {ids.shape}")
    if np.iinfo(ids.dtype).max < vocab_size - 1:
        raise ValueError(f"generate: idx is {ids.dtype}, which cannot hold this model's token ids (0 to "
                         f"{vocab_size - 1:,}); pass int32 or int64 ids")
    outside = (ids < 0) | (ids >= vocab_size)
    if outside.any():
        where = tuple(int(i) for i in np.argwhere(outside)[0])
        raise ValueError(f"generate: idx[{', '.join(map(str, where))}] is {ids[where]}, not a token of this model "
                         f"(ids 0 to {vocab_size - 1:,}); encode the prompt with the tokenizer the model was made for")
    return (ids if ids.ndim == 2 else ids[None]).astype(np.int64), back
