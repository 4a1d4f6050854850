"""Tests for models.gpt2 on tiny configs: names and shapes as GPT-2's, initialisation,
forward and loss, gradients against finite differences, the KV cache and sampling, cropping."""

import math
import warnings

import numpy as np
import pytest

import autograd as ag
import nn
from autograd import Tensor
from autograd import topological_order
from models.gpt import gpt2
from models.gpt.gpt2 import GPT, GPTConfig
from models.gpt.sampling import NO_TOKEN, sample, top_k_mask, top_p_mask
from models.gpt.gpt2_params import parameter_shapes
from tests.autograd._helpers import assert_streams_untouched

TINY = dict(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=8)


@pytest.fixture(autouse=True)
def _restore_engine_globals():
    dtype = ag.get_default_dtype()
    yield
    ag.set_default_dtype(dtype)
    assert ag.is_grad_enabled(), "a test left gradient recording switched off"


def tiny(seed=0, **overrides):
    ag.manual_seed(seed)
    return GPT(GPTConfig(**{**TINY, **overrides}))


def batch(config, B=2, T=None, seed=0):
    T = T or config.block_size
    tokens = np.random.default_rng(seed).integers(0, config.vocab_size, size=(B, T + 1))
    return tokens[:, :-1], tokens[:, 1:]


# ---- config, names, initialisation ---------------------------------------------------------------


def test_config_defaults_are_gpt2_small():
    c = GPTConfig()
    assert (c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd, c.dropout, c.bias) == \
        (50257, 1024, 12, 12, 768, 0.0, True)


@pytest.mark.parametrize("bad, message", [
    (dict(n_embd=10, n_head=4), "not divisible by n_head"),
    (dict(n_layer=0), "n_layer must be a positive integer"),
    (dict(dropout=1.0), "dropout"),
])
def test_config_rejects_bad_values(bad, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**{**TINY, **bad})


def test_parameter_names_are_gpt2s():
    model = tiny()
    names = [n for n, _ in model.named_parameters()]
    block = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
             "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
             "mlp.c_proj.weight", "mlp.c_proj.bias"]
    assert names == (["transformer.wte.weight", "transformer.wpe.weight"]
                     + [f"transformer.h.{i}.{n}" for i in range(2) for n in block]
                     + ["transformer.ln_f.weight", "transformer.ln_f.bias"])
    assert not any("lm_head" in n for n in names)  # tied: the head is wte itself
    shapes = dict((n, p.shape) for n, p in model.named_parameters())
    assert shapes["transformer.h.0.attn.c_attn.weight"] == (8, 24)  # (C, 3C): Conv1D's (in, out)
    assert shapes["transformer.h.1.mlp.c_fc.weight"] == (8, 32)
    assert shapes["transformer.h.1.mlp.c_proj.weight"] == (32, 8)


def test_initialisation_is_gpt2s_and_seeded():
    model = tiny(n_layer=4, n_embd=64, n_head=4, vocab_size=256, block_size=64)
    params = dict(model.named_parameters())
    resid_std = 0.02 / math.sqrt(2 * 4)
    for name, p in params.items():
        if name.endswith(".bias"):
            assert not p.data.any(), name
        elif ".ln_" in name:
            assert (p.data == 1).all(), name
        else:
            expected = resid_std if name.endswith("c_proj.weight") else 0.02
            assert abs(p.data.std() / expected - 1) < 0.08, (name, p.data.std(), expected)
            assert abs(p.data.mean()) < 0.1 * expected, name
    again = tiny(n_layer=4, n_embd=64, n_head=4, vocab_size=256, block_size=64)
    for (name, p), q in zip(model.named_parameters(), again.parameters()):
        np.testing.assert_array_equal(p.data, q.data, err_msg=name)
    other = tiny(seed=1, n_layer=4, n_embd=64, n_head=4, vocab_size=256, block_size=64)
    assert not np.array_equal(model.transformer.wte.weight.data, other.transformer.wte.weight.data)


def test_optimizer_groups_decay_only_matrices():
    model = tiny()
    decay, no_decay = model.optimizer_groups(0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim == 2 for p in decay["params"]) and all(p.ndim == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(model.parameters())
    nn.optim.AdamW(model.optimizer_groups(0.1), lr=1e-3)  # accepted as they are


def test_crop_block_size():
    model = tiny()
    x, _ = batch(model.config, B=1, T=5)
    before = model(x)[0].data
    optimizer = nn.optim.AdamW(model.parameters())
    config = model.config
    model.crop_block_size(5)
    assert model.config.block_size == 5 and config.block_size == 8  # the old config object is not changed
    assert {n: p.shape for n, p in model.named_parameters()} == parameter_shapes(model.config)
    np.testing.assert_array_equal(model(x)[0].data, before)
    assert model.generate(x, 4, temperature=0, use_cache=True).tolist() == \
        model.generate(x, 4, temperature=0, use_cache=False).tolist()
    with pytest.raises(ValueError, match="block_size is 5"):
        model(batch(model.config, B=1, T=6)[0])
    with pytest.raises(ValueError, match="crop_block_size"):
        model.crop_block_size(6)
    _, loss = model(x, x)
    loss.backward()
    optimizer.step()  # the optimizer still holds the (cropped) position table


# ---- forward and loss ----------------------------------------------------------------------------


def test_forward_shapes_and_initial_loss():
    model = tiny()
    x, y = batch(model.config, B=3, T=5)
    logits, loss = model(x)
    assert logits.shape == (3, 5, 16) and loss is None
    logits, loss = model(Tensor(x), targets=Tensor(y))
    assert loss.shape == () and abs(loss.item() - math.log(16)) < 0.1  # small init: near-uniform predictions


def test_lm_head_is_tied_to_the_token_embedding():
    model = tiny()
    x, _ = batch(model.config, B=1, T=4)
    logits, _ = model(x)
    features = model.transformer(x)
    np.testing.assert_allclose(logits.data, features.data @ model.transformer.wte.weight.data.T, rtol=1e-5, atol=1e-6)


def test_last_only_gives_the_last_positions_logits():
    model = tiny()
    x, _ = batch(model.config, B=2, T=5)
    last, _ = model(x, last_only=True)
    assert last.shape == (2, 1, 16)
    np.testing.assert_allclose(last.data, model(x)[0].data[:, -1:], rtol=1e-5, atol=1e-7)


def test_ignore_index_minus_one_leaves_those_targets_out():
    model = tiny()
    x, y = batch(model.config, B=2, T=6)
    ignored = y.copy()
    ignored[0, :3] = -1
    logits, loss = model(x, ignored)
    keep = ignored != -1
    expected = ag.cross_entropy(Tensor(logits.data[keep]), y[keep])
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-6)


def test_attention_is_causal():
    model = tiny()
    x, _ = batch(model.config, B=1, T=8)
    changed = x.copy()
    changed[0, 5] = (changed[0, 5] + 1) % 16
    a, _ = model(x)
    b, _ = model(changed)
    np.testing.assert_array_equal(a.data[:, :5], b.data[:, :5])
    assert not np.allclose(a.data[:, 5:], b.data[:, 5:])


@pytest.mark.parametrize("idx, error, message", [
    (np.zeros((1, 9), dtype=np.int64), ValueError, "block_size is 8"),
    (np.zeros((1, 3), dtype=np.float32), TypeError, "integer token ids"),
    (np.zeros(3, dtype=np.int64), ValueError, r"shape \(B, T\)"),
    (np.full((1, 3), 16), IndexError, "ids must lie in"),
])
def test_bad_ids_are_clear_errors(idx, error, message):
    with pytest.raises(error, match=message):
        tiny()(idx)


def test_gradients_match_finite_differences():
    ag.set_default_dtype(np.float64)
    model = tiny(vocab_size=8, block_size=4, n_layer=1, n_head=2, n_embd=4)
    x, y = batch(model.config, B=2, T=4)
    ag.gradcheck(lambda *params: model(x, y)[1], model.parameters(), atol=1e-7, rtol=1e-5)


def test_dropout_only_while_training():
    model = tiny(dropout=0.3)
    x, y = batch(model.config)
    a, b = model(x, y)[1].item(), model(x, y)[1].item()
    assert a != b  # fresh masks every call
    model.eval()
    plain = tiny(dropout=0.0)
    np.testing.assert_allclose(model(x, y)[1].item(), plain(x, y)[1].item(), rtol=1e-6)
    with ag.no_grad():
        logits, _ = model(x)  # eval: deterministic
    np.testing.assert_array_equal(logits.data, model(x)[0].data)


def test_adamw_overfits_one_batch():
    model = tiny()
    x, y = batch(model.config, B=2)
    optimizer = nn.optim.AdamW(model.optimizer_groups(0.01), lr=1e-2)
    losses = []
    for _ in range(30):
        _, loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_demo_loss_leaves_the_callers_seed_and_every_random_stream_as_they_were(monkeypatch):
    assert_streams_untouched(gpt2.demo_loss, monkeypatch)  # after manual_seed(7), as if it had not been called


def test_demo_loss_is_deterministic_named_and_scoped():
    state = ag.get_rng_state()
    first, second = gpt2.demo_loss(), gpt2.demo_loss()
    assert ag.get_rng_state() == state  # the caller's random stream is untouched
    assert first.item() == second.item() and first.name == "loss"
    recorded = topological_order(first)
    names = {t.name for t in recorded}
    scopes = {t.op.scope for t in recorded if t.op is not None}
    assert {"logits", "loss", "transformer.wte.weight", "transformer.h.1.mlp.c_fc.weight"} <= names
    assert {"transformer.h.0.attn", "transformer.h.1.mlp.c_fc", "transformer.ln_f", "lm_head"} <= scopes


ARTICLE_NAMES = ["transformer.wte(ids)", "transformer.wpe(ids)", "transformer.emb"] + [
    f"transformer.h.{i}.{name}" for i in range(2) for name in (
        "ln_1(x)", "attn.c_attn(x)", "attn.qkv", "attn.by_head", "attn.q", "attn.k", "attn.v", "attn.y",
        "attn.by_position", "attn.joined", "attn.c_proj(x)", "x", "ln_2(x)", "mlp.c_fc(x)", "mlp.gelu",
        "mlp.c_proj(x)")] + [
    "transformer.h.0(x)", "transformer.h.1(x)", "transformer.ln_f(x)", "rows", "wte_t", "row_scores", "logits",
    "loss"]


def test_every_intermediate_is_named_as_the_code_and_the_article_name_it():
    """Intermediates take the dotted path of the module whose forward made them, as parameters do: a module's
    output after its forward's argument, a forward's variables after themselves (nn.Module names both)."""
    recorded = topological_order(gpt2.demo_loss())
    intermediates = [t.name for t in recorded if t.op is not None]
    assert sorted(intermediates) == sorted(ARTICLE_NAMES)  # every one named, each name once


def test_with_dropout_each_dropped_tensor_keeps_a_name_of_its_own():
    model = tiny(dropout=0.5)
    x, y = batch(model.config)
    _, loss = model(x, targets=y)
    names = [t.name for t in topological_order(loss) if t.op is not None]
    assert None not in names and len(names) == len(set(names))
    assert {"transformer.emb", "transformer.drop(x)", "transformer.h.0.attn.c_proj(x)",
            "transformer.h.0.attn.resid_dropout(x)", "transformer.h.1.mlp.c_proj(x)",
            "transformer.h.1.mlp.dropout(x)"} <= set(names)


def test_nothing_is_named_without_a_graph(monkeypatch):
    """Under no_grad (generation) no op is recorded, so naming is skipped before any name is built."""
    model = tiny()
    x, _ = batch(model.config)

    def refuse(*args):
        raise AssertionError("named under no_grad")

    for step in ("_catch_frame", "Module._name_locals", "Module._name_output"):
        monkeypatch.setattr(f"nn.module.{step}", refuse)
    with ag.no_grad():
        model(x)
    model.generate(x[:1, :3], 4, temperature=0)  # cached decoding, under no_grad
    with pytest.raises(AssertionError, match="named"):
        model(x)  # recording: the names are given


# ---- the KV cache and generation -------------------------------------------------------------------


def test_cached_forward_equals_the_full_forward():
    model = tiny()
    x, _ = batch(model.config, B=2, T=8)
    full, _ = model(x)
    cache = gpt2.KVCache(model.config, 2, np.float32, "cpu")
    with ag.no_grad():
        prefill, _ = model(x[:, :3], kv_cache=cache)
        steps = [model(x[:, t:t + 1], kv_cache=cache)[0] for t in range(3, 8)]
    incremental = np.concatenate([prefill.data] + [s.data for s in steps], axis=1)
    np.testing.assert_allclose(incremental, full.data, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="after 8 cached"), ag.no_grad():
        model(x[:, :1], kv_cache=cache)
    with pytest.raises(RuntimeError, match="no_grad"):
        model(x[:, :1], kv_cache=gpt2.KVCache(model.config, 2, np.float32, "cpu"))


@pytest.mark.parametrize("cache_rows, rows", [(3, 1), (1, 3)])
def test_a_kv_cache_of_another_batch_is_refused_before_it_is_written(cache_rows, rows):
    """A cache of 3 rows once took layer 0's keys of 1 row broadcast to 3 and failed in attention, its layers
    then at different lengths; a cache of 1 row failed in NumPy's broadcast, naming neither."""
    model = tiny()
    cache = gpt2.KVCache(model.config, cache_rows, np.float32, "cpu")
    with pytest.raises(ValueError, match=rf"idx is a batch of {rows}, and the KV cache was made for a batch of "
                                         rf"{cache_rows}; make a KVCache for a batch of {rows}"), ag.no_grad():
        model(np.zeros((rows, 2), dtype=np.int64), kv_cache=cache)
    assert [layer.length for layer in cache.layers] == [0] * model.config.n_layer


@pytest.mark.parametrize("prompt_len, new", [(3, 4), (3, 20), (8, 5), (12, 3)])  # inside, past, at, over block_size
def test_greedy_with_and_without_cache_agree(prompt_len, new):
    model = tiny()
    prompt = batch(model.config, B=2, T=prompt_len, seed=1)[0]
    cached = model.generate(prompt, new, temperature=0)
    uncached = model.generate(prompt, new, temperature=0, use_cache=False)
    assert cached.shape == (2, prompt_len + new)
    np.testing.assert_array_equal(cached[:, :prompt_len], prompt)
    np.testing.assert_array_equal(cached, uncached)


def test_greedy_picks_the_argmax_of_the_full_forward():
    model = tiny()
    out = model.generate([[1, 2, 3]], 12, temperature=0)[0]
    for n in range(3, len(out)):
        window = np.array([out[max(0, n - 8):n]])
        assert out[n] == model(window)[0].data[0, -1].argmax()


def test_sampling_is_reproducible_under_manual_seed():
    model = tiny()
    runs = []
    for seed, use_cache in [(5, True), (5, True), (5, False), (6, True)]:
        ag.manual_seed(seed)
        runs.append(model.generate([[1, 2]], 16, temperature=1.5, use_cache=use_cache))
    assert runs[0] == runs[1] == runs[2]
    assert runs[0] != runs[3]


@pytest.mark.parametrize("options", [dict(top_k=1), dict(top_p=1e-6), dict(temperature=0, top_k=5)])
def test_top_k_one_and_tiny_top_p_are_greedy(options):
    model = tiny()
    greedy = model.generate([[4, 4, 2]], 10, temperature=0)
    ag.manual_seed(0)
    assert model.generate([[4, 4, 2]], 10, **{"temperature": 2.0, **options}) == greedy


def test_generate_refuses_ids_its_output_dtype_cannot_hold_and_ragged_prompts():
    """A uint8 prompt once came back with every new id wrapped modulo 256, and prompts of two lengths ended in
    NumPy's 'inhomogeneous shape'."""
    model = tiny(vocab_size=300)
    with pytest.raises(ValueError, match=r"^generate: idx is uint8, which cannot hold this model's token ids \(0 to "
                                         r"299\); pass int32 or int64 ids$"):
        model.generate(np.array([[1, 2]], dtype=np.uint8), 3)
    assert model.generate(np.array([[1, 2]], dtype=np.int16), 3).dtype == np.int16  # 299 fits
    with pytest.raises(ValueError, match=r"^generate: the prompts of a batch must have one length, got lengths "
                                         r"\[2, 3\]; pad them"):
        model.generate([[1, 2, 3], [4, 5]], 3)


@pytest.mark.parametrize("idx, where, value", [
    ([[1, 16]], "idx[0, 1]", 16),  # a padding row of wte: the embedding took it, and generate sampled on
    ([-1] + [1] * 8, "idx[0]", -1),  # before the last block_size tokens: never embedded, handed back as it came
])
def test_generate_refuses_prompt_ids_outside_the_vocabulary_before_any_work(idx, where, value):
    model = tiny().pad_vocab(64)  # wte has 64 rows for vocab_size 16
    with pytest.raises(ValueError) as error:
        model.generate(idx, 3)
    assert str(error.value) == (f"generate: {where} is {value}, not a token of this model (ids 0 to 15); encode the "
                                "prompt with the tokenizer the model was made for")


def test_generate_keeps_the_input_kind_and_mode():
    model = tiny()
    model.train()
    as_list = model.generate([1, 2, 3], 2, temperature=0)
    assert isinstance(as_list, list) and len(as_list) == 5 and as_list[:3] == [1, 2, 3]
    as_array = model.generate(np.array([[1, 2, 3]], dtype=np.int32), 2, temperature=0)
    assert isinstance(as_array, np.ndarray) and as_array.dtype == np.int32 and as_array.shape == (1, 5)
    as_tensor = model.generate(Tensor([[1, 2, 3]]), 2, temperature=0)
    assert isinstance(as_tensor, Tensor) and as_tensor.shape == (1, 5) and not as_tensor.requires_grad
    assert as_tensor.tolist()[0] == as_list == as_array[0].tolist()
    assert model.generate([[1, 2, 3]], 0) == [[1, 2, 3]]
    assert model.training and ag.is_grad_enabled()
    assert model.transformer.h[0].attn.c_attn.weight.name == "transformer.h.0.attn.c_attn.weight"


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=-1), "temperature must be a finite number >= 0 (0 is greedy), got -1"),
    (dict(temperature=float("nan")), "temperature must be a finite number >= 0 (0 is greedy), got nan"),
    (dict(temperature=float("inf")), "temperature must be a finite number >= 0 (0 is greedy), got inf"),
    (dict(temperature="hot"), "temperature must be a finite number >= 0 (0 is greedy), got 'hot'"),
    (dict(top_k=0), "top_k must be a positive integer or None, got 0"),
    (dict(top_k=True), "top_k must be a positive integer or None, got True"),
    (dict(top_p=0), "top_p must be a number in (0, 1] or None, got 0"),
    (dict(top_p=1.5), "top_p must be a number in (0, 1] or None, got 1.5"),
    (dict(top_p=float("nan")), "top_p must be a number in (0, 1] or None, got nan"),
    (dict(max_new_tokens=-1), "max_new_tokens must be a non-negative integer, got -1"),
    (dict(max_new_tokens=True), "max_new_tokens must be a non-negative integer, got True"),
    (dict(max_new_tokens=np.bool_(True)), f"max_new_tokens must be a non-negative integer, got {np.bool_(True)!r}"),
    (dict(max_new_tokens=2.0), "max_new_tokens must be a non-negative integer, got 2.0"),
    (dict(temperature=True), "temperature must be a finite number >= 0 (0 is greedy), got True"),
])
def test_generate_rejects_bad_options(kwargs, message):
    with pytest.raises(ValueError) as error:
        tiny().generate([[1]], **{"max_new_tokens": 2, **kwargs})
    assert str(error.value) == "generate: " + message


def test_sample_filters_top_k_and_top_p():
    logits = np.log(np.array([[0.05, 0.4, 0.3, 0.15, 0.1]] * 400))
    ag.manual_seed(0)
    assert set(sample(logits, top_k=2)) == {1, 2}
    assert set(sample(logits, top_p=0.65)) == {1, 2}  # 0.4 + 0.3 reaches 0.65; 0.4 alone does not
    assert set(sample(logits, top_p=0.7)) == {1, 2}  # mass before token 3 is 0.7: it stays out
    assert set(sample(logits, top_p=0.71)) == {1, 2, 3}
    counts = np.bincount(sample(logits), minlength=5) / 400
    np.testing.assert_allclose(counts, [0.05, 0.4, 0.3, 0.15, 0.1], atol=0.07)
    np.testing.assert_array_equal(sample(logits[:2], temperature=0), [1, 1])
    cold = sample(logits, temperature=0.05)  # temperature → 0 approaches greedy
    assert (cold == 1).mean() > 0.95


def test_the_filters_work_row_by_row_on_any_leading_shape():
    logits = np.array([[[0.0, 2.0, 1.0, 1.0, -1.0],
                        [3.0, 0.0, 0.0, 0.0, 0.0]]])  # (1, 2, 5)
    np.testing.assert_array_equal(top_k_mask(logits, 2), [[[0, 1, 1, 1, 0], [1, 1, 1, 1, 1]]])  # ties stay
    np.testing.assert_array_equal(top_k_mask(logits[0, 0], 1), [0, 1, 0, 0, 0])
    probs = np.array([0.1, 0.4, 0.3, 0.15, 0.05])
    np.testing.assert_array_equal(top_p_mask(probs, 0.7), [0, 1, 1, 0, 0])  # mass before token 3 is 0.7
    np.testing.assert_array_equal(top_p_mask(probs, 0.71), [0, 1, 1, 1, 0])
    np.testing.assert_array_equal(top_p_mask(probs, 1e-9), [0, 1, 0, 0, 0])  # the likeliest always stays
    even = np.full((2, 4), 0.25)
    np.testing.assert_array_equal(top_p_mask(even, 0.5), [[1, 1, 0, 0]] * 2)  # ties by id, as argmax


def test_top_p_sums_the_mass_before_each_token_without_taking_it_back_off():
    """The mass before a token is the running sum of the likelier ones: (0.4 + 0.3) - 0.3 is 0.39999999999999997,
    which once kept 0.3 beside a 0.4 that reaches top_p = 0.4 alone."""
    probs = np.array([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]])
    np.testing.assert_array_equal(top_p_mask(probs, 0.4), [[0, 0, 0, 1], [1, 0, 0, 0]])
    np.testing.assert_array_equal(top_p_mask(probs, 0.41), [[0, 0, 1, 1], [1, 1, 0, 0]])
    np.testing.assert_array_equal(top_p_mask(np.array([0.5, 0.3, 0.2]), 0.8), [1, 1, 0])  # 0.5 + 0.3 is 0.8




@pytest.mark.parametrize("temperature", [1e-320, 5e-324, 1e-300, 1e-200, 1e-30])
def test_a_temperature_so_small_that_logits_over_it_overflow_is_greedy(temperature):
    logits = np.array([[1.0, 3.0, 2.0, -1e300], [50.0, -50.0, 700.0, 699.0], [-3.0, -1.0, -2.0, -1.0000001]])
    ag.manual_seed(0)
    for _ in range(20):
        np.testing.assert_array_equal(sample(logits, temperature=temperature), [1, 2, 1])
        np.testing.assert_array_equal(sample(logits, temperature=temperature, top_k=2, top_p=0.5), [1, 2, 1])


def test_a_tiny_temperature_shares_a_tie_between_the_tied_tokens():
    logits = np.array([[0.0, 5.0, -1.0, 5.0]] * 400)
    ag.manual_seed(0)
    picks = sample(logits, temperature=1e-320)
    assert set(picks) == {1, 3} and 150 < (picks == 1).sum() < 250


def test_generate_with_a_tiny_temperature_is_greedy():
    model = tiny()
    greedy = model.generate([[4, 4, 2]], 10, temperature=0)
    ag.manual_seed(0)
    assert model.generate([[4, 4, 2]], 10, temperature=1e-320) == greedy


@pytest.mark.parametrize("options", [dict(temperature=0), dict(top_k=1), dict(), dict(top_k=2), dict(top_p=0.5)])
def test_a_row_of_logits_with_nan_or_inf_gets_no_token(options):
    """NaN logits once gave token 0 (argmax's pick of the NaN, or a draw from a NaN distribution) as a choice."""
    logits = np.array([[0.0, np.nan, 1.0], [np.inf, 0.0, 1.0], [-np.inf] * 3, [-np.inf, 2.0, -np.inf]])
    ag.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor a NumPy warning about the refused rows on the way
        np.testing.assert_array_equal(sample(logits, **options), [NO_TOKEN, NO_TOKEN, NO_TOKEN, 1])


DAMAGED = ("transformer.wpe.weight holds 8 NaN or inf values: the weights are damaged, as a diverged run leaves "
           "them; load another checkpoint (docs/debugging.md: --detect-anomaly and --health-interval show where a "
           "run goes wrong)")


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("options", [dict(temperature=0), dict(temperature=0.9, top_k=5, top_p=0.9)])
def test_generate_refuses_nan_logits_naming_the_token_and_the_weights(use_cache, options):
    """A NaN weight once gave token 0 at every step from it on, silently."""
    model = tiny()
    model.transformer.wpe.weight.data[5] = np.nan  # position 5's input predicts position 6: new token 5 after 2
    with pytest.raises(ValueError) as error:
        model.generate([[1, 2], [3, 4]], 10, use_cache=use_cache, **options)  # 12 tokens: past block_size 8
    assert str(error.value) == ("generate: the logits for new token 5 (position 6 of row 0) hold NaN or inf, so no "
                                "token can be drawn: " + DAMAGED)


def test_generate_refuses_logits_that_finite_weights_overflow():
    model = tiny()
    ln_f = model.transformer.ln_f
    ln_f.weight.data[...], ln_f.bias.data[...] = 3e38, 3e38  # float32's features overflow to inf, and the logits
    with pytest.raises(ValueError) as error, np.errstate(over="ignore", invalid="ignore"):
        model.generate([[1, 2, 3]], 4)
    assert str(error.value).startswith("generate: the logits for new token 1 (position 3) hold NaN or inf, so no "
                                       "token can be drawn: the weights are finite but as large as 3e+38, and the "
                                       "forward overflowed float32 with them, as a diverged run leaves them; load")


def test_a_padded_vocabulary_changes_no_loss_logit_or_gradient_and_saves_the_real_rows(tmp_path):
    config = GPTConfig(vocab_size=50, block_size=8, n_layer=1, n_head=2, n_embd=8)
    with ag.seeded(3):
        plain = GPT(config)
    padded = GPT(config).pad_vocab(64)  # same weights once copied below; wte grows to 64 rows
    assert padded.config.padded_vocab_size == 64 and padded.transformer.wte.weight.shape == (64, 8)
    padded.load_state_dict({**plain.state_dict(), "transformer.wte.weight": np.concatenate(
        [plain.transformer.wte.weight.data, np.full((14, 8), 7.0, dtype=np.float32)])})  # padding rows: junk
    x = np.random.default_rng(0).integers(0, 50, size=(2, 8))
    y = np.where(np.arange(8) < 6, np.roll(x, -1, axis=1), -1)
    (logits, loss), (padded_logits, padded_loss) = plain(x, y), padded(x, y)
    assert padded_logits.shape == (2, 8, 50)
    np.testing.assert_allclose(padded_logits.data, logits.data, rtol=1e-6, atol=1e-6)
    assert padded_loss.item() == pytest.approx(loss.item(), rel=1e-6)
    loss.backward()
    padded_loss.backward()
    grads = dict(plain.named_parameters())
    for name, p in padded.named_parameters():
        got = p.grad[:50] if name == "transformer.wte.weight" else p.grad
        np.testing.assert_allclose(got, grads[name].grad, rtol=1e-5, atol=1e-6, err_msg=name)
    assert np.all(padded.transformer.wte.weight.grad[50:] == 0)  # the padding scores no token
    _, only_loss = padded(x, y, return_logits=False)
    assert _ is None and only_loss.item() == pytest.approx(loss.item(), rel=1e-6)
    padded.save_pretrained(tmp_path / "hf")
    again = GPT.from_pretrained(tmp_path / "hf")
    assert again.config.vocab_size == 50 and again.transformer.wte.weight.shape == (50, 8)
    np.testing.assert_array_equal(again.transformer.wte.weight.data, plain.transformer.wte.weight.data)


def test_pad_vocab_to_must_be_a_positive_integer():
    with pytest.raises(ValueError, match="GPTConfig: pad_vocab_to must be a positive integer, got 0"):
        GPTConfig(pad_vocab_to=0)
    assert GPTConfig(pad_vocab_to=64).padded_vocab_size == 50304
