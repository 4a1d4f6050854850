"""Lesson 1's bigram model rebuilt from engine ops alone must reproduce the lesson's numbers exactly.

Corpus → character vocabulary (order of first appearance) → (current, next) pairs; the model is
logits = E[cur] @ W_U, the loss the mean cross-entropy; full-batch SGD with learning rate 1.0 in float64.
"""
import math

import numpy as np
import pytest

import autograd as ag
from autograd import Tensor

CORPUS = "我吃苹果。你吃米饭。我喝水。他吃苹果。苹果很甜。米饭很香。我爱你。他喝水。"
EXPECTED_LOSS = {0: 2.7319984903342007, 100: 0.6807755505264127, 500: 0.6556566358890348}
COUNTING_BOUND = 0.653024490038894


def _pairs():
    vocab = list(dict.fromkeys(CORPUS))
    ids = np.array([vocab.index(ch) for ch in CORPUS])
    return vocab, ids[:-1], ids[1:]


def test_vocabulary_and_pairs():
    vocab, cur, nxt = _pairs()
    assert len(vocab) == 15
    assert vocab[:4] == ["我", "吃", "苹", "果"]
    assert len(cur) == len(nxt) == 36
    assert vocab[cur[0]] == "我" and vocab[nxt[0]] == "吃"


def _counting_bound(cur, nxt, V):
    """The conditional-frequency entropy: the loss of the best possible bigram table, from counts alone."""
    counts = np.zeros((V, V))
    np.add.at(counts, (cur, nxt), 1)
    probs = counts / counts.sum(axis=1, keepdims=True)
    return -np.mean(np.log(probs[cur, nxt]))


def test_counting_lower_bound():
    vocab, cur, nxt = _pairs()
    assert _counting_bound(cur, nxt, len(vocab)) == pytest.approx(COUNTING_BOUND, abs=1e-12)


def test_bigram_training_reproduces_the_lesson():
    vocab, cur, nxt = _pairs()
    V, d, lr = len(vocab), 8, 1.0
    rng = np.random.default_rng(0)
    E = Tensor(rng.normal(0, 1, (V, d)), requires_grad=True)
    W_U = Tensor(rng.normal(0, 0.1, (d, V)), requires_grad=True)
    assert E.dtype == W_U.dtype == np.float64

    losses = {}
    for step in range(501):
        logits = ag.embedding(E, cur) @ W_U          # (36, V)
        loss = ag.cross_entropy(logits, nxt)          # mean −log softmax(logits)[next]
        losses[step] = loss.item()
        E.grad = W_U.grad = None
        loss.backward()
        E.data -= lr * E.grad
        W_U.data -= lr * W_U.grad

    for step, expected in EXPECTED_LOSS.items():
        assert losses[step] == pytest.approx(expected, abs=1e-6), step
    # at step 0 the loss is close to ln V: W_U starts small, so the softmax starts nearly uniform
    assert abs(losses[0] - math.log(V)) < 0.05
    bound = _counting_bound(cur, nxt, V)
    assert all(loss > bound for loss in losses.values())
    assert all(losses[s + 1] <= losses[s] + 1e-12 for s in range(100, 500))  # settles monotonically


def test_bigram_first_step_gradient_matches_a_numpy_derivation():
    # dL/dlogits = (softmax − onehot)/B;  dW_U = hᵀ dlogits with h = E[cur];  dE = scatter-add of dlogits W_Uᵀ
    vocab, cur, nxt = _pairs()
    V, d = len(vocab), 8
    rng = np.random.default_rng(0)
    E0, W0 = rng.normal(0, 1, (V, d)), rng.normal(0, 0.1, (d, V))
    E, W_U = Tensor(E0, requires_grad=True), Tensor(W0, requires_grad=True)
    ag.cross_entropy(ag.embedding(E, cur) @ W_U, nxt).backward()

    h = E0[cur]
    z = h @ W0
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    dz = p.copy()
    dz[np.arange(len(cur)), nxt] -= 1
    dz /= len(cur)
    dE = np.zeros_like(E0)
    np.add.at(dE, cur, dz @ W0.T)
    np.testing.assert_allclose(W_U.grad, h.T @ dz, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(E.grad, dE, rtol=1e-12, atol=1e-15)
