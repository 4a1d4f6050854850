"""Each raw CUDA kernel's algorithm, through its NumPy twin (autograd/kernels/cuda_twins.py), in float64.

Each twin is checked against the composed op (what the CPU computes) and
its backward against central differences of the twin's own forward. The
shapes cross the kernels' edges: rows longer than a warp's 32 lanes and not
a multiple of it, the causal prefix ending inside a lane pass, a cached
offset (fewer queries than keys), a padded vocabulary, ignored targets, a
partial block of layer-norm rows, a flat buffer longer than one grid pass.
Last, the ops' GPU paths run cuda.py's own launchers on the CPU, over
stand-ins of the raw kernels that read each pointer's memory as CUDA does
(launchers_on_the_cpu): what a call site hands a kernel is checked too.
"""
import re
import types

import numpy as np
import pytest

import autograd as ag
import nn
from autograd.kernels import cuda as ck

from autograd.kernels import cuda_twins as twin
from ._helpers import leaf


def central_differences(f, x, v, got, rng, picks=40, eps=1e-6):
    """Assert `got` = ∂(Σ v ⊙ f(x))/∂x at `picks` random entries of x (central differences; all of a small x)."""
    flat = x.reshape(-1)
    for i in rng.choice(flat.size, size=min(picks, flat.size), replace=False):
        saved = flat[i]
        flat[i] = saved + eps
        up = np.sum(v * f(x))
        flat[i] = saved - eps
        down = np.sum(v * f(x))
        flat[i] = saved
        assert got.reshape(-1)[i] == pytest.approx((up - down) / (2 * eps), rel=1e-6, abs=1e-7), f"entry {i}"


def attention_twin(q, k, v, offset):
    """O and a backward closure, built as the GPU path builds them: GEMMs around the twin kernels."""
    scale = 1 / np.sqrt(q.shape[-1])
    p = twin.attention_softmax_forward(q @ np.swapaxes(k, -1, -2), offset, scale)
    out = p @ v

    def backward(g):
        dv = np.swapaxes(p, -1, -2) @ g
        ds = twin.attention_softmax_backward(g @ np.swapaxes(v, -1, -2), p, g, out, offset, scale)
        return ds @ k, np.swapaxes(ds, -1, -2) @ q, dv
    return out, backward


@pytest.mark.parametrize("tq, tk, causal, d, dv", [
    (37, 37, True, 3, 4), (5, 40, True, 3, 4), (33, 45, False, 3, 4), (1, 3, True, 3, 4),
    (63, 63, True, 1, 1), (65, 65, True, 80, 80), (1, 65, True, 128, 64)])  # GPT-2's head sizes 64, 80, 128
def test_attention_twin_matches_the_composed_op_and_central_differences(rng, tq, tk, causal, d, dv):
    q, k, v = rng.normal(size=(2, 2, tq, d)), rng.normal(size=(2, 2, tk, d)), rng.normal(size=(2, 2, tk, dv))
    q *= 3  # sharp rows: the online maximum moves within and across lane passes
    offset = tk - tq if causal and tq > 1 else tk
    out, backward = attention_twin(q, k, v, offset)
    tensors = [leaf(a) for a in (q, k, v)]
    composed = ag.scaled_dot_product_attention(*tensors, causal=causal)
    np.testing.assert_allclose(out, composed.data, rtol=1e-12, atol=1e-13)
    g = rng.normal(size=out.shape)
    composed.backward(g)
    grads = backward(g)
    for i, (got, t) in enumerate(zip(grads, tensors)):
        np.testing.assert_allclose(got, t.grad, rtol=1e-10, atol=1e-12)
        inputs = [q, k, v]

        def f(x, i=i):
            args = list(inputs)
            args[i] = x
            return attention_twin(*args, offset)[0]
        central_differences(f, inputs[i].copy(), g, got, rng)


def test_attention_twin_writes_zeros_above_the_causal_prefix(rng):
    s = rng.normal(size=(1, 1, 34, 34))
    p = twin.attention_softmax_forward(s, 0, 1.0)
    assert np.all(np.triu(p[0, 0], 1) == 0)
    np.testing.assert_allclose(p.sum(-1), 1, rtol=1e-13)
    dp = twin.attention_softmax_backward(rng.normal(size=s.shape), p, rng.normal(size=(1, 1, 34, 2)),
                                         rng.normal(size=(1, 1, 34, 2)), 0, 1.0)
    assert np.all(np.triu(dp[0, 0], 1) == 0)


@pytest.mark.parametrize("rows, n", [(70, 70), (3, 5), (64, 768), (1, 1), (33, 65)])
def test_layer_norm_twin_matches_the_composed_op_and_central_differences(rng, rows, n):
    x, w, b = rng.normal(2, 3, size=(rows, n)), rng.normal(size=n), rng.normal(size=n)
    eps = 1e-5
    y, stats = twin.layer_norm_forward(x, w, b, eps)
    tensors = [leaf(a) for a in (x, w, b)]
    composed = ag.layer_norm(*tensors, eps=eps)
    np.testing.assert_allclose(y, composed.data, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(stats[0], x.mean(-1), rtol=1e-13)
    np.testing.assert_allclose(stats[1], 1 / np.sqrt(x.var(-1) + eps), rtol=1e-12)
    g = rng.normal(size=y.shape)
    composed.backward(g)
    grads = twin.layer_norm_backward(g, x, w, stats)
    for got, t in zip(grads, tensors):
        np.testing.assert_allclose(got, t.grad, rtol=1e-10, atol=1e-11)
    inputs = [x, w, b]
    for i, got in enumerate(grads):
        def f(a, i=i):
            args = list(inputs)
            args[i] = a
            return twin.layer_norm_forward(*args, eps)[0]
        central_differences(f, inputs[i].copy(), g, got, rng)


@pytest.mark.parametrize("vocab, stride", [(1100, 1152), (7, 7), (600, 640), (1, 1), (513, 520), (50257, 50304)])
def test_cross_entropy_twin_matches_the_composed_op_and_central_differences(rng, vocab, stride):
    rows = 6
    z = rng.normal(size=(rows, stride)) * 4
    targets = rng.integers(0, vocab, size=rows)
    targets[2] = -1  # ignored
    logits = leaf(z)
    composed = ag.cross_entropy(logits[:, :vocab], targets, ignore_index=-1, reduction="none")
    out = z.copy()
    loss = twin.cross_entropy_forward(z, targets, vocab, -1, out)
    np.testing.assert_allclose(loss, composed.data, rtol=1e-12, atol=1e-13)
    g = rng.normal(size=rows)
    composed.backward(g)
    np.testing.assert_allclose(out * g[:, None], logits.grad, rtol=1e-12, atol=1e-14)  # backward's scaling
    assert np.all(out[:, vocab:] == 0) and np.all(out[2] == 0)
    in_place = z.copy()
    np.testing.assert_array_equal(twin.cross_entropy_forward(in_place, targets, vocab, -1, in_place), loss)
    np.testing.assert_array_equal(in_place, out)  # writing over the logits gives the same gradient

    def f(a):
        return twin.cross_entropy_forward(a, targets, vocab, -1, np.empty_like(a))
    central_differences(f, z.copy(), g, out * g[:, None], rng, picks=200)


def test_cross_entropy_twin_keeps_the_log_sum_apart_from_a_huge_maximum():
    z = np.array([[1e30, 1e30, 0.0], [3e38, 3e38, 3e38]])  # m + log Σ rounded to m: losses of 0, not ln 2, ln 3
    loss = twin.cross_entropy_forward(z, np.array([0, 2]), 3, -1, np.empty_like(z))
    np.testing.assert_allclose(loss, np.log([2, 3]), rtol=1e-12)


def test_the_twins_start_below_any_float64_score():
    """lowest<T>() was −3e38 for double too: a row of scores all below it kept s = 0, a loss of −inf (not ln 2) and
    a P of NaN (not ½, 0, ½)."""
    z = np.array([[-1e300, -2e300, -1e300]])
    loss = twin.cross_entropy_forward(z, np.array([0]), 3, -1, np.empty_like(z))
    np.testing.assert_allclose(loss, np.log(2), rtol=1e-12)
    p = twin.attention_softmax_forward(z.reshape(1, 1, 1, 3).copy(), 3, 1.0)
    np.testing.assert_allclose(p.reshape(-1), [0.5, 0, 0.5], rtol=1e-12)


def test_the_kernels_lowest_is_the_twins():
    lowest = dict(re.findall(r"__device__ (float|double) lowest<\1>\(\) \{ return ([-.\de]+)f?; \}", ck.PRELUDE))
    assert float(lowest["double"]) == twin.LOWEST == np.finfo(np.float64).min
    assert np.float32(lowest["float"]) == np.finfo(np.float32).min


def test_cross_entropy_op_over_a_padded_vocabulary_ignores_the_padding(rng):
    z = rng.normal(size=(4, 10))
    targets = np.array([0, 6, 2, 5])
    padded = leaf(z)
    loss = ag.ops.CrossEntropy.apply(padded, targets=targets, classes=7)
    real = leaf(z[:, :7])
    expected = ag.cross_entropy(real, targets)
    np.testing.assert_allclose(loss.data, expected.data, rtol=1e-13)
    loss.backward()
    expected.backward()
    np.testing.assert_allclose(padded.grad[:, :7], real.grad, rtol=1e-13)
    assert np.all(padded.grad[:, 7:] == 0)


@pytest.mark.parametrize("size, max_norm", [(300_000, 1.0), (1000, 1e6), (5, 0.5)])
def test_grad_norm_twin_matches_clip_grad_norm(rng, size, max_norm):
    flat = rng.normal(size=size)
    norm, scale = twin.grad_norm(flat, max_norm)
    np.testing.assert_allclose(norm, np.sqrt(np.sum(flat ** 2)), rtol=1e-12)
    p = nn.Parameter(flat.copy())
    p.grad = flat.copy()
    assert nn.optim.clip_grad_norm_([p], max_norm) == pytest.approx(norm, rel=1e-12)
    np.testing.assert_allclose(flat * scale, p.grad, rtol=1e-13)
    assert scale == (1.0 if max_norm > norm else pytest.approx(max_norm / (norm + 1e-6), rel=1e-15))


def test_twins_use_the_kernels_launch_shapes():
    # the twins read these from kernels/cuda.py, so a change of launch shape there is checked here too
    assert ck.CE_THREADS % twin.LANES == 0 and ck.CE_THREADS // twin.LANES <= twin.LANES
    assert ck.ROW_WARPS * twin.LANES <= 1024 and ck.LN_ROWS_PER_BLOCK >= ck.ROW_WARPS


@pytest.fixture
def twins_as_kernels(monkeypatch):
    """kernels.fused hands the ops the twins for NumPy arrays: their GPU paths (the hooks in ops.py and
    nn/optim.py: saved statistics, offsets, in-place writes, the clipped buffer) run on the CPU."""
    from autograd import backend, kernels

    def grad_norm(flat, max_norm):
        norm, scale = twin.grad_norm(flat, max_norm)
        return np.array([norm]), np.array([scale])
    stand_ins = {"attention_softmax_forward": twin.attention_softmax_forward,
                 "attention_softmax_backward": twin.attention_softmax_backward,
                 "layer_norm_forward": twin.layer_norm_forward, "layer_norm_backward": twin.layer_norm_backward,
                 "cross_entropy_forward": lambda z, t, vocab, ignore, out: twin.cross_entropy_forward(
                     z, t, vocab, -1 if ignore is None else ignore, out),
                 "grad_norm": grad_norm}
    assert set(stand_ins) == set(ck.LAUNCHERS)
    monkeypatch.setattr(kernels, "fused", lambda name, array: stand_ins.get(name))
    monkeypatch.setattr(backend, "free_memory", lambda: 0)  # P is rebuilt in backward, the longer path


def model_loss_and_grads(seed=0, steps=2):
    from models.gpt.gpt2 import GPT, GPTConfig
    with ag.seeded(seed):
        model = GPT(GPTConfig(vocab_size=50, block_size=40, n_layer=1, n_head=2, n_embd=8)).pad_vocab(64)
    for p in model.parameters():
        p.data = p.data.astype(np.float64)
    opt = nn.optim.AdamW(model.parameters(), lr=1e-2, flat_grads=True)
    x = np.random.default_rng(seed).integers(0, 50, size=(2, 37))
    y = np.where(np.arange(37) < 30, np.roll(x, -1, axis=1), -1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        _, loss = model(x, y, return_logits=False)
        loss.backward()
        norm = nn.optim.clip_grad_norm_(model.parameters(), 0.05)
        losses.append((loss.item(), float(np.asarray(norm).reshape(-1)[0])))
        opt.step()
    return losses, {n: p.data.copy() for n, p in model.named_parameters()}


def test_the_ops_gpu_paths_through_the_twins_train_as_the_composed_ops(twins_as_kernels):
    fused_losses, fused_weights = model_loss_and_grads()
    from autograd import kernels
    kernels.fused = lambda name, array: None  # monkeypatch restores it after the test
    losses, weights = model_loss_and_grads()
    np.testing.assert_allclose(fused_losses, losses, rtol=1e-10)
    assert fused_losses[0][1] > 0.05  # clipping did scale (the buffer, in place)
    for name, w in weights.items():
        np.testing.assert_allclose(fused_weights[name], w, rtol=1e-9, atol=1e-12, err_msg=name)


def test_the_fused_cross_entropy_backpropagates_again_while_the_graph_is_kept(twins_as_kernels, rng):
    z = leaf(rng.normal(size=(3, 5)))
    loss = ag.cross_entropy(z, np.array([0, 1, 2]), reuse_logits=True)
    loss.backward(retain_graph=True)  # scaled into a new array: the kernel's p − onehot(y) stays
    first = z.grad.copy()
    loss.backward()  # the last use: scaled in place
    np.testing.assert_allclose(z.grad, 2 * first, rtol=1e-12)


def test_the_fused_cross_entropy_backpropagates_again_on_a_gpu(device, rng):
    from autograd import backend
    z = ag.Tensor(rng.normal(size=(3, 5)).astype(np.float32), requires_grad=True, device=device)
    loss = ag.cross_entropy(z, ag.Tensor(np.array([0, 1, 2]), device=device), reuse_logits=True)
    loss.backward(retain_graph=True)
    first = backend.to_host(z.grad).copy()
    loss.backward()
    np.testing.assert_allclose(backend.to_host(z.grad), 2 * first, rtol=1e-6)


def test_ids_outside_the_table_or_the_classes_are_refused_on_a_gpu(device, rng):
    z = ag.Tensor(rng.normal(size=(2, 10)).astype(np.float32), device=device)
    with pytest.raises(IndexError, match=re.escape("cross_entropy: targets must lie in [0, 7) (the number of classes, "
                                                   "ignore_index=-1 aside); got values from 0 to 7")):
        ag.cross_entropy(z, ag.Tensor(np.array([0, 7]), device=device), ignore_index=-1, classes=7)
    with pytest.raises(IndexError, match=re.escape("embedding: ids must lie in [0, 2) (the table's rows); got values "
                                                   "from -1 to 0")):
        ag.embedding(z, ag.Tensor(np.array([0, -1]), device=device))


def test_each_cuda_kernel_matches_its_twin_in_float64(device, rng):
    """Under --device cuda: the kernels themselves, launched by kernels.fused, against their twins."""
    from autograd import backend, kernels
    cp = backend.xp_for(device)

    def on(a):
        return cp.asarray(a)

    def same(got, expected):
        np.testing.assert_allclose(backend.to_host(got), expected, rtol=1e-12, atol=1e-13)
    s = rng.normal(size=(2, 3, 37, 45))
    same(kernels.fused("attention_softmax_forward", on(s))(on(s), 8, 0.3),
         twin.attention_softmax_forward(s.copy(), 8, 0.3))
    dp, p = rng.normal(size=s.shape), rng.random(size=s.shape)
    g, o = rng.normal(size=(2, 3, 37, 5)), rng.normal(size=(2, 3, 37, 5))
    same(kernels.fused("attention_softmax_backward", on(dp))(on(dp), on(p), on(g), on(o), 8, 0.3),
         twin.attention_softmax_backward(dp.copy(), p, g, o, 8, 0.3))
    x, w, b = rng.normal(size=(70, 70)), rng.normal(size=70), rng.normal(size=70)
    y, stats = kernels.fused("layer_norm_forward", on(x))(on(x), on(w), on(b), 1e-5)
    y_twin, stats_twin = twin.layer_norm_forward(x, w, b, 1e-5)
    same(y, y_twin)
    same(stats, stats_twin)
    g = rng.normal(size=x.shape)
    for got, expected in zip(kernels.fused("layer_norm_backward", on(x))(on(g), on(x), on(w), stats),
                             twin.layer_norm_backward(g, x, w, stats_twin)):
        same(got, expected)
    z, targets = rng.normal(size=(6, 1152)) * 4, rng.integers(0, 1100, size=6)
    targets[2] = -1
    z_gpu, out = on(z), z.copy()
    same(kernels.fused("cross_entropy_forward", z_gpu)(z_gpu, on(targets), 1100, -1, z_gpu),
         twin.cross_entropy_forward(z, targets, 1100, -1, out))
    same(z_gpu, out)  # written in place
    flat = rng.normal(size=300_000)
    norm, scale = kernels.fused("grad_norm", on(flat))(on(flat), 1.0)
    assert (float(norm[0]), float(scale[0])) == pytest.approx(twin.grad_norm(flat, 1.0), rel=1e-12)


# --- the launchers and the ops' call sites, with raw kernels that read memory as CUDA does ---------------------------

class _Memory:
    """`count` elements of `dtype` from `array`'s first element on, as an __array_interface__ for NumPy."""

    def __init__(self, array, dtype, count):
        self.__array_interface__ = dict(array.__array_interface__, shape=(count,), strides=None, typestr=dtype.str,
                                        descr=[("", dtype.str)])
        self.base = array  # kept alive while the view is


def pointer(array, dtype, count):
    """What a raw kernel compiled for `dtype` reads and writes through a CuPy array's data pointer: `count`
    elements of `dtype` laid end to end from the array's first element, whatever the array's strides and dtype
    (a transposed view is read as its base's memory; a float64 array, as twice as many floats)."""
    dtype = np.dtype(dtype)
    owner = array
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    start, end = array.__array_interface__["data"][0], owner.__array_interface__["data"][0] + owner.nbytes
    assert start + count * dtype.itemsize <= end, f"the kernel reads past the array's memory ({array.shape})"
    return np.asarray(_Memory(array, dtype, count))


_C_TYPES = {"int": np.int32, "long long": np.int64, "double": np.float64}  # and T, the instantiation's


def _parameters(name, dtype):
    """Kernel `name`'s parameters from its CUDA source: (name, NumPy type, is a pointer) each, T as `dtype`."""
    listed = re.search(rf"__global__ void {name}\(([^)]*)\)", ck.RAW[name]).group(1)
    found = []
    for declaration in listed.split(","):
        kind, param = declaration.replace("const ", "").strip().rsplit(" ", 1)
        is_pointer = kind.endswith("*") or param.startswith("*")
        kind = kind.rstrip("* ")
        found.append((param.lstrip("*"), np.dtype(dtype if kind == "T" else _C_TYPES[kind]), is_pointer))
    return found


def _run_twin(name, grid, a, ptr):
    """Kernel `name`'s work by its twin: `a` holds the scalar arguments, `ptr(param, count)` a pointer's memory."""
    if name == "attention_softmax_forward":
        twin.attention_softmax_forward(ptr("s", a["rows"] * a["tk"]).reshape(-1, a["tq"], a["tk"]), a["offset"],
                                       a["scale"])
    elif name == "attention_softmax_backward":
        rows, tq, tk, dv = a["rows"], a["tq"], a["tk"], a["dv"]
        twin.attention_softmax_backward(*(ptr(p, rows * tk).reshape(-1, tq, tk) for p in ("dp", "p")),
                                        *(ptr(p, rows * dv).reshape(-1, tq, dv) for p in ("g", "o")),
                                        a["offset"], a["scale"])
    elif name == "layer_norm_forward":
        rows, n = a["rows"], a["n"]
        y, stats = twin.layer_norm_forward(ptr("x", rows * n).reshape(rows, n), ptr("w", n), ptr("b", n), a["eps"])
        ptr("y", rows * n)[...], ptr("mean", rows)[...], ptr("rstd", rows)[...] = y.reshape(-1), *stats
    elif name == "layer_norm_backward":
        rows, n, blocks = a["rows"], a["n"], grid[0]
        stats = np.stack([ptr("mean", rows), ptr("rstd", rows)])
        dx, dw, db = twin.layer_norm_backward(ptr("g", rows * n).reshape(rows, n),
                                              ptr("x", rows * n).reshape(rows, n), ptr("w", n), stats)
        ptr("dx", rows * n)[...] = dx.reshape(-1)
        for param, total in (("partial_dw", dw), ("partial_db", db)):
            partial = ptr(param, blocks * n).reshape(blocks, n)
            partial[...] = 0
            partial[0] = total  # the column sums whole in the first block's row: the second launch adds zeros
    elif name == "layer_norm_columns":
        blocks, n = a["blocks"], a["n"]
        ptr("dw", n)[...] = ptr("partial_dw", blocks * n).reshape(blocks, n).sum(axis=0)
        ptr("db", n)[...] = ptr("partial_db", blocks * n).reshape(blocks, n).sum(axis=0)
    elif name == "cross_entropy_forward":
        rows, stride = grid[0], a["stride"]
        ptr("loss", rows)[...] = twin.cross_entropy_forward(
            ptr("z", rows * stride).reshape(rows, stride), ptr("targets", rows), a["vocab"], a["ignore"],
            ptr("dz", rows * stride).reshape(rows, stride))
    elif name == "sum_of_squares":
        partial = ptr("partial", grid[0])
        partial[...] = 0
        partial[0] = twin.grad_norm(ptr("x", a["n"]), 1.0)[0] ** 2
    else:
        assert name == "clip_scale", name
        total = np.sqrt(ptr("partial", a["blocks"]).sum())
        factor = a["max_norm"] / (total + 1e-6)
        ptr("norm", 1)[0], ptr("scale", 1)[0] = total, 1.0 if factor >= 1.0 else factor


class RawKernelOnTheCpu:
    """A raw kernel as kernels.fused compiles it for `dtype`, called as CuPy calls one: (grid, block, args). It
    checks what CUDA and the kernel's signature take (blocks in every grid dimension, one argument of the
    declared C type per parameter) and runs the kernel's twin on the memory its pointers reach."""

    def __init__(self, name, dtype):
        self.name, self.parameters = name, _parameters(name, dtype)

    def __call__(self, grid, block, args):
        assert all(grid) and all(block), f"{self.name}: CUDA refuses a launch of grid {grid}, block {block}"
        assert len(args) == len(self.parameters), (self.name, len(args))
        scalars, arrays = {}, {}
        for (param, kind, is_pointer), arg in zip(self.parameters, args):
            if is_pointer:
                assert isinstance(arg, np.ndarray), (self.name, param, type(arg))
                arrays[param] = (arg, kind)
            else:  # CuPy passes a scalar by its own type: a Python int would be a 64-bit one
                assert isinstance(arg, np.generic) and arg.dtype == kind, (self.name, param, type(arg), kind)
                scalars[param] = arg.item()
        _run_twin(self.name, grid, scalars, lambda param, count: pointer(*arrays[param], count))


@pytest.fixture
def launchers_on_the_cpu(monkeypatch):
    """The ops' GPU path on the CPU: kernels.fused takes NumPy arrays for the GPU's and hands out cuda.py's own
    launchers over RawKernelOnTheCpu (the elementwise kernels stay composed), so each call site's arguments
    reach the kernels as raw pointers do on a GPU."""
    from autograd import backend, kernels
    gpu = types.SimpleNamespace(ElementwiseKernel=lambda *definition: None)
    monkeypatch.setattr(kernels, "backend", types.SimpleNamespace(
        device_of=lambda array: "cuda" if isinstance(array, np.ndarray) else backend.device_of(array),
        xp_for=lambda device: gpu))
    monkeypatch.setattr(kernels, "_cuda_kernels", {})
    monkeypatch.setattr(kernels, "_raw_kernel", RawKernelOnTheCpu)
    monkeypatch.setattr(backend, "free_memory", lambda: 0)  # P is rebuilt in backward, the longer path


def test_the_ops_gpu_paths_through_the_launchers_train_as_the_composed_ops(launchers_on_the_cpu, monkeypatch):
    fused_losses, fused_weights = model_loss_and_grads()
    from autograd import kernels
    monkeypatch.setattr(kernels, "fused", lambda name, array: None)
    losses, weights = model_loss_and_grads()
    np.testing.assert_allclose(fused_losses, losses, rtol=1e-10)
    for name, w in weights.items():
        np.testing.assert_allclose(fused_weights[name], w, rtol=1e-9, atol=1e-12, err_msg=name)


def test_a_raw_kernel_reads_a_view_as_its_memory_from_the_first_element():
    base = np.arange(12.0)
    np.testing.assert_array_equal(pointer(base.reshape(3, 4).T, np.float64, 12), base)
    np.testing.assert_array_equal(pointer(base[::2], np.float64, 6), base[:6])
    assert pointer(base, np.float32, 2).tobytes() == base[:1].tobytes()  # float64's bytes read as floats
    with pytest.raises(AssertionError, match="reads past the array's memory"):
        pointer(base[6:], np.float64, 7)


def composed_and_fused(fn, *arrays):
    """fn's output and its inputs' gradients (g = 1), with every fused kernel off and then through the launchers."""
    from autograd import kernels
    results = []
    for fused in (lambda name, array: None, kernels.fused):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(kernels, "fused", fused)
            tensors = [leaf(a) for a in arrays]
            out = fn(*tensors)
            out.backward(np.ones(out.shape))
            results.append([out.data, *(t.grad for t in tensors)])
    return results


def test_layer_norm_hands_the_kernels_gamma_and_beta_of_any_layout(launchers_on_the_cpu, rng):
    x = rng.normal(size=(5, 40))
    gamma, beta = rng.normal(size=(40, 2)), rng.normal(size=80)

    def f(x, gamma, beta):
        return ag.layer_norm(x[:, ::-1], gamma[:, 1], beta[::2])  # strided views: the pointers reach other values
    composed, fused = composed_and_fused(f, x, gamma, beta)
    for got, expected in zip(fused, composed):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_a_gpu_kernel_is_handed_a_floating_array_with_elements(launchers_on_the_cpu, monkeypatch):
    """An integer T does not compile (GELU's tanh of an integer is ambiguous in CUDA): a GELU of integers
    composes, which says to convert them; and an empty array would ask CUDA for a grid of no blocks."""
    from autograd import kernels
    monkeypatch.setattr(kernels.backend.xp_for("cuda"), "ElementwiseKernel", lambda *definition: "compiled")
    assert kernels.fused("gelu_forward", np.ones(3, dtype=np.float32)) == "compiled"
    for array in (np.arange(3), np.ones(3, dtype=bool), np.ones((0, 3))):
        assert kernels.fused("gelu_forward", array) is None, array.dtype
    assert kernels.fused("layer_norm_forward", np.ones((0, 3))) is None
    with pytest.raises(TypeError, match="GELU: computes in floating point, but got int64"):
        ag.Tensor(np.arange(3)).gelu()


@pytest.mark.parametrize("what", ["layer_norm", "cross_entropy", "attention"])
def test_an_empty_batch_launches_no_kernel(launchers_on_the_cpu, what):
    """CUDA refuses a grid of no blocks: no rows compose, as on the CPU."""
    def f(x):
        if what == "layer_norm":
            return ag.layer_norm(x, ag.ones(6, dtype=np.float64))
        if what == "cross_entropy":
            return ag.cross_entropy(x, np.zeros(0, dtype=np.int64), reduction="sum")
        return ag.scaled_dot_product_attention(x[:, None], x[:, None], x[:, None], causal=False)
    composed, fused = composed_and_fused(f, np.zeros((0, 3, 6)) if what == "attention" else np.zeros((0, 6)))
    for got, expected in zip(fused, composed):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("targets, ignore, values", [
    ([0, 7, 2], None, "0 to 7"),  # a padded column: inside the row, no class
    ([0, 12, 2], None, "0 to 12"),  # past the row of 10: the kernel would read the next row's logits
    ([-5, 1, -1], -1, "-5 to 1"),  # negative but not the ignored id: before the row
])
def test_the_cuda_path_refuses_a_target_outside_the_classes_before_its_kernel_reads_it(launchers_on_the_cpu,
                                                                                        monkeypatch, rng, targets,
                                                                                        ignore, values):
    launched = []
    run = RawKernelOnTheCpu.__call__
    monkeypatch.setattr(RawKernelOnTheCpu, "__call__", lambda kernel, *args: (launched.append(kernel.name),
                                                                              run(kernel, *args)))
    z = leaf(rng.normal(size=(3, 10)))
    aside = "" if ignore is None else f", ignore_index={ignore} aside"
    with pytest.raises(IndexError, match=re.escape(f"cross_entropy: targets must lie in [0, 7) (the number of "
                                                   f"classes{aside}); got values from {values}")):
        ag.ops.CrossEntropy.apply(z, targets=np.array(targets), ignore_index=ignore, classes=7)
    assert launched == []
    ag.ops.CrossEntropy.apply(z, targets=np.array([0, 6, 2 if ignore is None else ignore]), ignore_index=ignore,
                              classes=7)
    assert launched == ["cross_entropy_forward"]  # the same call in range: the CUDA launcher ran
