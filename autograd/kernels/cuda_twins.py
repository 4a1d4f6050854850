"""NumPy twins of the raw CUDA kernels in cuda.py beside this file: each repeats its kernel's order of work.

A kernel's threads become an array axis: a warp's 32 lanes, a block's
threads. Each twin makes the same lane-strided passes (element j belongs to
lane j mod 32, or thread j mod blockDim), the same online (max, sum of exp)
updates in the same order, the same butterfly merges (__shfl_xor_sync with
16, 8, 4, 2, 1), the same partial sums per block and the same in-place writes.
So a twin run in float64 checks the kernel's algorithm (masks, edges, merges,
saved statistics) against the composed op and central differences, on a
machine without a GPU. What it cannot check is CUDA itself: indexing into
device memory, launch shapes; those run under --device cuda.
"""
import numpy as np

from . import cuda as ck

LANES = 32
LOWEST = np.finfo(np.float64).min  # the kernels' lowest<double>(): the twins compute in float64


def lane_chunks(width, threads=LANES):
    """Column indices (chunks, threads): chunk c, thread i holds column c·threads + i (past the end: masked)."""
    chunks = -(-width // threads)
    return np.arange(chunks * threads).reshape(chunks, threads)


def butterfly_sum(v):
    """warp_sum: v (…, 32) after the xor shuffles; every lane ends with the total."""
    lanes = np.arange(LANES)
    for o in (16, 8, 4, 2, 1):
        v = v + v[..., lanes ^ o]
    return v


def merge(m, s, m2, s2):
    top = np.maximum(m, m2)
    return top, s * np.exp(m - top) + s2 * np.exp(m2 - top)


def butterfly_merge(m, s):
    """warp_merge: (m, s) pairs (…, 32) merged by the xor shuffles."""
    lanes = np.arange(LANES)
    for o in (16, 8, 4, 2, 1):
        m, s = merge(m, s, m[..., lanes ^ o], s[..., lanes ^ o])
    return m, s


def online(values, active, m, s):
    """One online-softmax step per thread where `active`: a new maximum rescales the sum."""
    with np.errstate(over="ignore"):
        bigger = values > m
        grown = np.where(bigger, s * np.exp(m - values) + 1, s + np.exp(values - m))
    return np.where(active & bigger, values, m), np.where(active, grown, s)


def row_limits(rows, tq, tk, offset):
    """The last visible key of each row: min(i + offset, Tk − 1), i = row mod Tq."""
    return np.minimum(np.arange(rows) % tq + offset, tk - 1)


def attention_softmax_forward(s, offset, scale):
    """attention_softmax_forward: s (…, Tq, Tk) becomes P in place, one warp per row."""
    tq, tk = s.shape[-2:]
    rows = s.reshape(-1, tk)
    last = row_limits(len(rows), tq, tk, offset)[:, None]
    m, total = np.full((len(rows), LANES), LOWEST), np.zeros((len(rows), LANES))
    for j in lane_chunks(tk):  # j: the 32 columns this pass of the lanes reads
        active = j[None, :] <= last
        x = rows[:, np.minimum(j, tk - 1)] * scale
        m, total = online(x, active, m, total)
    m, total = butterfly_merge(m, total)
    inv = 1 / total
    for j in lane_chunks(tk):
        inside = j < tk
        jj = j[inside]
        with np.errstate(over="ignore"):  # above the mask exp is computed and thrown away; the kernel skips it
            p = np.exp(rows[:, jj] * scale - m[:, inside]) * inv[:, inside]
        rows[:, jj] = np.where(jj[None, :] <= last, p, 0)
    return s


def attention_softmax_backward(dp, p, g, o, offset, scale):
    """attention_softmax_backward: dp (…, Tq, Tk) becomes dS = scale · P ⊙ (dP − G·O) in place."""
    tq, tk = dp.shape[-2:]
    dv = o.shape[-1]
    rows, prows = dp.reshape(-1, tk), p.reshape(-1, tk)
    g2, o2 = g.reshape(-1, dv), o.reshape(-1, dv)
    last = row_limits(len(rows), tq, tk, offset)[:, None]
    dot = np.zeros((len(rows), LANES))
    for d in lane_chunks(dv):
        inside = d < dv
        dot[:, inside] += g2[:, d[inside]] * o2[:, d[inside]]
    dot = butterfly_sum(dot)
    for j in lane_chunks(tk):
        inside = j < tk
        jj = j[inside]
        rows[:, jj] = np.where(jj[None, :] <= last, scale * prows[:, jj] * (rows[:, jj] - dot[:, inside]), 0)
    return dp


def warp_row_sum(values, n):
    """Σ over each row's n columns as a warp adds them: lane-strided partial sums, then the butterfly."""
    acc = np.zeros((len(values), LANES))
    for j in lane_chunks(n):
        inside = j < n
        acc[:, inside] += values[:, j[inside]]
    return butterfly_sum(acc)[:, 0]


def layer_norm_forward(x, w, b, eps):
    """layer_norm_forward: (y, stats) with stats (2, rows) = (μ, rstd), one warp per row."""
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    mu = warp_row_sum(x2, n) / n
    rs = 1 / np.sqrt(warp_row_sum((x2 - mu[:, None]) ** 2, n) / n + eps)
    y = (x2 - mu[:, None]) * rs[:, None] * w + b
    return y.reshape(x.shape), np.stack([mu, rs])


def layer_norm_backward(g, x, w, stats):
    """layer_norm_backward then layer_norm_columns: (dx, dγ, dβ) with per-block partial column sums."""
    n = x.shape[-1]
    g2, x2 = g.reshape(-1, n), x.reshape(-1, n)
    mu, rs = stats[0][:, None], stats[1][:, None]
    gh = g2 * w
    sg = warp_row_sum(gh, n)[:, None] / n
    sgx = warp_row_sum(gh * (x2 - mu) * rs, n)[:, None] / n
    dx = (g2 * w - sg - (x2 - mu) * rs * sgx) * rs
    blocks = -(-len(x2) // ck.LN_ROWS_PER_BLOCK)
    partial_dw, partial_db = np.zeros((blocks, n)), np.zeros((blocks, n))
    for k in range(blocks):
        for r in range(k * ck.LN_ROWS_PER_BLOCK, min((k + 1) * ck.LN_ROWS_PER_BLOCK, len(x2))):  # in row order
            partial_dw[k] += g2[r] * (x2[r] - stats[0][r]) * stats[1][r]
            partial_db[k] += g2[r]
    dw, db = np.zeros(n), np.zeros(n)
    for k in range(blocks):
        dw += partial_dw[k]
        db += partial_db[k]
    return dx.reshape(x.shape), dw, db


def block_merge(m, s, threads):
    """A block's (m, s) pairs (rows, threads): each warp merges its lanes, then warp 0 merges the warps'."""
    warps = threads // LANES
    m, s = butterfly_merge(m.reshape(-1, warps, LANES), s.reshape(-1, warps, LANES))
    lanes = np.arange(LANES)
    first_m = np.where(lanes < warps, m[:, np.minimum(lanes, warps - 1), 0], LOWEST)
    first_s = np.where(lanes < warps, s[:, np.minimum(lanes, warps - 1), 0], 0)
    m, s = butterfly_merge(first_m, first_s)
    return m[:, 0], s[:, 0]


def cross_entropy_forward(z, targets, vocab, ignore, out):
    """cross_entropy_forward: per-row losses, and softmax − onehot over the first `vocab` columns into `out`."""
    rows, stride = z.shape
    threads = ck.CE_THREADS
    m, s = np.full((rows, threads), LOWEST), np.zeros((rows, threads))
    for j in lane_chunks(vocab, threads):
        m, s = online(z[:, np.minimum(j, vocab - 1)], (j < vocab)[None, :], m, s)
    m, s = block_merge(m, s, threads)
    valid = targets != ignore
    picked = z[np.arange(rows), np.where(valid, targets, 0)]
    loss = np.where(valid, np.log(s) - (picked - m), 0)  # read before the row is overwritten
    inv = 1 / s
    for j in lane_chunks(stride, threads):
        jj = j[j < stride]
        p = np.exp(z[:, np.minimum(jj, vocab - 1)] - m[:, None]) * inv[:, None] - (jj[None, :] == targets[:, None])
        out[:, jj] = np.where(valid[:, None] & (jj[None, :] < vocab), p, 0)
    return loss


def grad_norm(flat, max_norm):
    """sum_of_squares then clip_scale: (norm, scale) from per-block partial sums in double."""
    threads, blocks = 256, ck.NORM_BLOCKS
    stride = blocks * threads
    chunks = -(-flat.size // stride)
    padded = np.zeros(chunks * stride)
    padded[:flat.size] = flat
    acc = np.zeros(stride)
    for c in range(chunks):  # the grid-stride loop: thread i adds elements i, i + stride, …
        piece = padded[c * stride:(c + 1) * stride]
        acc += piece * piece
    partial = block_sum(acc.reshape(blocks, threads))
    total = np.sqrt(block_sum(thread_strided(partial, threads)[None, :])[0])
    factor = max_norm / (total + 1e-6)
    return total, 1.0 if factor >= 1.0 else factor


def thread_strided(values, threads):
    """Each of `threads` threads' sum of values[tid], values[tid + threads], …"""
    padded = np.zeros(-(-len(values) // threads) * threads)
    padded[:len(values)] = values
    acc = np.zeros(threads)
    for piece in padded.reshape(-1, threads):
        acc += piece
    return acc


def block_sum(acc):
    """A block's per-thread values (blocks, threads) summed: butterfly per warp, then warp 0 over the warps."""
    warps = acc.shape[1] // LANES
    per_warp = butterfly_sum(acc.reshape(len(acc), warps, LANES))[:, :, 0]
    lanes = np.arange(LANES)
    first = np.where(lanes < warps, per_warp[:, np.minimum(lanes, warps - 1)], 0)
    return butterfly_sum(first)[:, 0]
