"""Each raw CUDA kernel's algorithm, through its NumPy twin (autograd/kernels/cuda_twins.py), in float64.

Each twin is checked against the composed op (what the CPU computes) and
its backward against central differences of the twin's own forward. The
shapes cross the kernels' edges: rows longer than a warp's 32 lanes and not
a multiple of it, the causal prefix ending inside a lane pass, a cached
offset (fewer queries than keys), a padded vocabulary, ignored targets, a
partial block of layer-norm rows, a flat buffer longer than one grid pass.
"""
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


@pytest.mark.parametrize("tq, tk, causal", [(37, 37, True), (5, 40, True), (33, 45, False), (1, 3, True)])
def test_attention_twin_matches_the_composed_op_and_central_differences(rng, tq, tk, causal):
    q, k, v = rng.normal(size=(2, 2, tq, 3)), rng.normal(size=(2, 2, tk, 3)), rng.normal(size=(2, 2, tk, 4))
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


@pytest.mark.parametrize("rows, n", [(70, 70), (3, 5), (64, 768)])
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


@pytest.mark.parametrize("vocab, stride", [(1100, 1152), (7, 7), (600, 640)])
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


def test_each_cuda_kernel_matches_its_twin_in_float64(device, rng):
    """Under --device cuda: the kernels themselves, launched by kernels.fused, against their twins."""
    from autograd import backend
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
