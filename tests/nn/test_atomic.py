"""Library calls either succeed or change nothing (nn.lora, load_state_dict, merge/unmerge, the optimizers'
constructors), and modules refuse impossible sizes when they are built, in our words."""
import numpy as np
import pytest

import autograd as ag
import nn
from autograd import Tensor
from models.gpt.gpt2 import GPT, GPTConfig
from models.gpt.tokenizer import ByteBPETokenizer, CharTokenizer, GPT2Tokenizer

TINY = GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=8)
NUMPY_WORDS = ("object has no attribute", "not iterable", "division by zero", "math domain error",
               "negative dimensions", "cannot be interpreted", "tuple index out of range")


def refused(error, match, call):
    with pytest.raises(error, match=match) as caught:
        call()
    assert not any(word in str(caught.value) for word in NUMPY_WORDS), caught.value


def snapshot(model):
    """Everything a call could change: each parameter (object, array, flag) under its name, and each module."""
    return ([(name, id(p), p.data.copy(), p.requires_grad, p.grad) for name, p in model.named_parameters()],
            [(name, id(m)) for name, m in model.named_modules()])


def same(a, b):
    (params_a, modules_a), (params_b, modules_b) = a, b
    assert modules_a == modules_b
    assert [(n, i, f, g) for n, i, _, f, g in params_a] == [(n, i, f, g) for n, i, _, f, g in params_b]
    for (_, _, x, _, _), (_, _, y, _, _) in zip(params_a, params_b):
        np.testing.assert_array_equal(x, y)


def tiny_gpt():
    with ag.seeded(0):
        return GPT(TINY)


@pytest.mark.parametrize("r, alpha, targets, match", [
    (2, 4, ("c_attn", "nope"), "no nn.Linear named 'nope'"),
    (0, 4, ("c_attn",), "r must be an integer"),
    (2, 0, ("c_attn",), "alpha must be a positive number"),
    (2, 4, (), "targets is empty"),
    (2.5, 4, ("c_attn",), "r must be an integer"),
])
def test_atomic_a_failed_lora_call_leaves_the_model_as_it_was(r, alpha, targets, match):
    model = tiny_gpt()
    before = snapshot(model)
    with pytest.raises(ValueError, match=match):
        nn.lora(model, r, alpha, targets)
    same(before, snapshot(model))
    assert not any(isinstance(m, nn.LoRALinear) for m in model.modules())


def test_atomic_lora_that_succeeds_freezes_the_rest():
    model = tiny_gpt()
    nn.lora(model, 2, 4, ("c_attn",))
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {
        f"transformer.h.{i}.attn.c_attn.lora_{ab}" for i in range(2) for ab in "AB"}


@pytest.mark.parametrize("state, match", [
    (None, r"load_state_dict into Linear: .*dict.*NoneType"),
    ([1, 2], r"load_state_dict into Linear: .*dict.*list"),
    ({"weight": [[1.0] * 3] * 2, "bias": [1.0] * 3}, r"load_state_dict into Linear: 'weight' is a list"),
    ({"weight": np.ones((2, 3), np.float32), "bias": None}, r"load_state_dict into Linear: 'bias' is a NoneType"),
    ({"weight": np.ones((2, 3), np.float32), "bias": np.ones(4, np.float32)}, "mis-shaped keys"),
    ({"weight": np.ones((2, 3), np.float32), "bias": np.array(["a", "b", "c"])}, "'bias'"),
])
def test_atomic_a_refused_load_state_dict_changes_nothing(state, match):
    layer = nn.Linear(2, 3)
    before = snapshot(layer)
    refused((TypeError, KeyError, ValueError), match, lambda: layer.load_state_dict(state))
    same(before, snapshot(layer))


def test_atomic_merge_that_fails_leaves_the_layer_unmerged_and_unchanged():
    layer = nn.LoRALinear(nn.Linear(4, 3), r=2, alpha=2)
    layer.lora_B.data = np.ones((3, 3), np.float32)  # a shape that cannot multiply lora_A
    weight = layer.weight.data.copy()
    with pytest.raises(ValueError):
        layer.merge()
    assert not layer.merged
    np.testing.assert_array_equal(layer.weight.data, weight)


def test_atomic_merge_then_unmerge_restores_the_base_exactly():
    layer = nn.LoRALinear(nn.Linear(4, 3), r=2, alpha=2)
    layer.lora_B.data = np.full((2, 3), 0.5, np.float32)
    weight = layer.weight.data.copy()
    layer.merge()
    assert layer.merged and not np.array_equal(layer.weight.data, weight)
    layer.unmerge()
    np.testing.assert_array_equal(layer.weight.data, weight)


@pytest.mark.parametrize("make, match", [
    (lambda ps: nn.optim.AdamW([{"params": ps[:1]}, {"params": ps[1:], "lr": -1.0}]), "lr"),
    (lambda ps: nn.optim.AdamW(ps, betas=(0.9, 2.0)), "beta"),
    (lambda ps: nn.optim.SGD(ps + ps[:1], lr=0.1), "also parameter 0"),
    (lambda ps: nn.optim.AdamW(ps, lr=0.1, flat_grads=True, weight_decay=-1), "weight_decay"),
])
def test_atomic_a_refused_optimizer_changes_no_parameter(make, match):
    layer = nn.Linear(2, 3)
    grads = {name: p.grad for name, p in layer.named_parameters()}
    before = snapshot(layer)
    with pytest.raises((ValueError, TypeError), match=match):
        make(layer.parameters())
    same(before, snapshot(layer))
    assert {name: p.grad for name, p in layer.named_parameters()} == grads


# --- leftovers: modules refuse what they cannot be, when built ------------------------------------


@pytest.mark.parametrize("build, match", [
    (lambda: nn.Linear(0, 3), r"Linear: in_features must be a positive integer, got 0"),
    (lambda: nn.Linear(-1, 3), r"Linear: in_features must be a positive integer, got -1"),
    (lambda: nn.Linear(2.5, 3), r"Linear: in_features must be a positive integer, got 2.5"),
    (lambda: nn.Linear(2, True), r"Linear: out_features must be a positive integer, got True"),
    (lambda: nn.Embedding(-1, 3), r"Embedding: num_embeddings must be a positive integer, got -1"),
    (lambda: nn.Embedding(4, 2.0), r"Embedding: embedding_dim must be a positive integer, got 2.0"),
    (lambda: nn.LayerNorm(0), r"LayerNorm: normalized_shape \(the last axis's size; one axis only\) must be a "
                              r"positive integer, got 0"),
    (lambda: nn.LayerNorm(2.5), r"LayerNorm: normalized_shape .* must be a positive integer, got 2.5"),
    (lambda: nn.LayerNorm((2, 3)), r"LayerNorm: normalized_shape .* must be a positive integer, got \(2, 3\)"),
    (lambda: nn.GELU(approximate="none"), r"GELU: approximate='none' is not implemented: this GELU is GPT-2's tanh "
                                          r"approximation; pass approximate='tanh' or leave it out"),
    (lambda: nn.Dropout(2), r"Dropout: p must be a probability in \[0, 1\], got 2"),
    (lambda: nn.Dropout("0.1"), r"Dropout: p must be a probability in \[0, 1\], got '0.1'"),
])
def test_leftover_modules_refuse_impossible_sizes_when_built(build, match):
    refused((ValueError, TypeError), match, build)


def test_leftover_linear_on_a_0d_input_names_linear():
    refused(ag.ShapeError, r"linear: input \(\)", lambda: nn.Linear(2, 3)(Tensor(1.0)))


@pytest.mark.parametrize("tokenizer", [lambda: GPT2Tokenizer(), lambda: CharTokenizer("ab"),
                                       lambda: ByteBPETokenizer([])])
@pytest.mark.parametrize("text", [None, 7, b"bytes"])
def test_leftover_encode_of_what_is_no_text_names_the_tokenizer(tokenizer, text):
    tok = tokenizer()
    refused(TypeError, rf"{type(tok).__name__}\.encode: text must be a str, got {type(text).__name__}",
            lambda: tok.encode(text))


@pytest.mark.parametrize("tokens, match", [(1.5, "integer"), (10 ** 12, "memory"), (-1, "integer")])
def test_leftover_generate_refuses_a_length_it_cannot_make_up_front(tokens, match):
    model = tiny_gpt()
    refused((ValueError, TypeError), rf"generate: max_new_tokens .*{match}",
            lambda: model.generate([[1, 2]], max_new_tokens=tokens))
