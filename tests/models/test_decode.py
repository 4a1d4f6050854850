"""The static-cache decode path (models/gpt/decode.py) and its kernels (models/gpt/decode_kernels.py), on the CPU.

The kernels' NumPy twins are checked against the composed ops; `generate`
through the twins (GPT_DECODE=static) against the dynamic cache and the
uncached path; the Philox draw against Random123's known answers and for its
distribution; the sampler against sampling.py's masks and the softmax it
draws from. Every CUDA source compiles with NVRTC for sm_80 and sm_90; under
--device cuda the graph, the eager kernels and the CPU give the same tokens.
"""
import warnings

import numpy as np
import pytest

import autograd as ag
import nn
from models.gpt import decode, decode_kernels as dk, gpt2
from models.gpt.gpt2 import GPT, GPTConfig
from models.gpt.sampling import NO_TOKEN, top_k_mask, top_p_mask
from tests.nvrtc import ARCHES, REGISTERS_PER_BLOCK, compile_cuda, registers, static_shared_memory

SMALL = dict(vocab_size=40, block_size=12, n_layer=2, n_head=2, n_embd=16)


def model(seed=0, dtype=np.float64, **overrides):
    ag.manual_seed(seed)
    m = GPT(GPTConfig(**{**SMALL, **overrides}))
    for p in m.parameters():
        p.data = p.data.astype(dtype)
    return m


def generate(m, prompt, n, how, monkeypatch, **options):
    monkeypatch.setenv("GPT_DECODE", how)
    return m.generate(prompt, n, **options)


# --- the counter-based generator ---

@pytest.mark.parametrize("counter, key, expected", [  # Random123's kat_vectors for philox4x32_10
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])
def test_philox_gives_the_known_answers(counter, key, expected):
    words = dk.philox4x32([[c] for c in counter], key)
    assert [int(w[0]) for w in words] == list(expected)


def test_uniform_draws_are_uniform_independent_and_keyed():
    positions = np.arange(100_000)
    u = dk.uniform(positions, 0, (12345, 678))
    assert u.min() >= 0 and u.max() < 1
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    chi2 = ((counts - 5000) ** 2 / 5000).sum()
    assert chi2 < 43.8  # the 99.9 % point of chi-square with 19 degrees of freedom
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.015  # neighbouring counters: no correlation
    np.testing.assert_array_equal(dk.uniform(positions[:5], 0, (12345, 678)), u[:5])  # a counter, not a state
    assert not np.isin(dk.uniform(positions, 0, (12345, 679)), u).any()  # another key, other numbers
    assert not np.isin(dk.uniform(positions, 1, (12345, 678)), u).any()  # another row, other numbers


# --- the sampler's kept set and distribution ---

@pytest.mark.parametrize("top_k, top_p", [(5, 1.0), (0, 0.63), (7, 0.81), (0, 0.05), (3, 0.999), (40, 1.0)])
@pytest.mark.parametrize("ties", [False, True])
def test_the_kept_tokens_are_sampling_pys(top_k, top_p, ties):
    rng = np.random.default_rng(top_k)
    logits = rng.standard_normal((6, 40)) * 2
    if ties:
        logits = np.round(logits)  # many equal logits: ties at the k-th value and at the top-p edge
    temperature = 0.7
    kept, e = dk.kept_tokens(logits, temperature, top_k, top_p)
    x = (logits - logits.max(axis=1, keepdims=True)) / temperature  # sampling.py's order: the max off, then divide
    expected = top_k_mask(x, top_k) if 0 < top_k < 40 else np.ones_like(kept)
    probs = np.where(expected, np.exp(x), 0)
    probs /= probs.sum(axis=1, keepdims=True)
    if top_p < 1:
        expected &= top_p_mask(probs, top_p)
    np.testing.assert_array_equal(kept, expected)
    np.testing.assert_allclose(e, np.exp(x), rtol=1e-15)


def test_the_sampler_draws_from_the_filtered_softmax():
    logits = np.array([2.0, 1.0, 1.0, 0.5, 0.0, -1.0, -3.0, 1.5])
    rows = 40_000
    params = np.array([0.8, 6, 0.9, 987, 654])
    picks = dk.sample_rows(np.tile(logits, (rows, 1)), params, position=3)  # a draw per row: counter (3, row)
    kept, e = dk.kept_tokens(logits[None], 0.8, 6, 0.9)
    p = np.where(kept, e, 0)[0] / np.where(kept, e, 0).sum()
    counts = np.bincount(picks, minlength=len(logits))
    assert (counts[~kept[0]] == 0).all()
    expected = p[kept[0]] * rows
    chi2 = ((counts[kept[0]] - expected) ** 2 / expected).sum()
    assert chi2 < 20.5  # the 99.9 % point of chi-square with kept - 1 = 4 degrees of freedom
    np.testing.assert_array_equal(dk.sample_rows(np.tile(logits, (rows, 1)), params, position=3), picks)


def test_greedy_sampling_is_the_first_largest_logit():
    logits = np.array([[0.0, 3.0, 3.0, 1.0], [5.0, -1.0, 5.0, 5.0]])
    for params in ([0, 0, 1.0, 1, 2], [1.0, 1, 1.0, 1, 2]):  # temperature 0, or top_k 1
        np.testing.assert_array_equal(dk.sample_rows(logits, np.array(params), 1), [1, 0])


@pytest.mark.parametrize("temperature", [1e-310, 5e-324, 1e-300])
def test_a_tiny_temperature_draws_from_the_largest_logits(temperature):
    """The max comes off before the division: logits / 1e-310 would overflow to inf, and inf - inf is NaN."""
    logits = np.tile([[0.5, 3.0, -2.0, 3.0, 1.0, -7.0]], (400, 1))  # a tie at the top: ids 1 and 3
    for top_k, top_p in ((0, 1.0), (4, 1.0), (0, 0.9), (3, 0.999)):
        kept, e = dk.kept_tokens(logits, temperature, top_k, top_p)
        assert np.isfinite(e).all()
        np.testing.assert_array_equal(e[0], [0, 1, 0, 1, 0, 0])
        picks = dk.sample_rows(logits, np.array([temperature, top_k, top_p, 11, 22]), position=5)
        assert set(picks) == {1, 3}  # the tied largest logits share the draws (top-p keeps both: each 1/2)
    for dtype in (np.float32, np.float64):  # the float32 logits a float32 model's head writes, too
        picks = dk.sample_rows(logits.astype(dtype), np.array([temperature, 0, 1.0, 3, 4]), position=2)
        assert set(picks) == {1, 3}


@pytest.mark.parametrize("params", [[0, 0, 1.0, 1, 2], [0.8, 2, 0.5, 1, 2], [1.0, 0, 1.0, 1, 2]])
def test_a_row_of_nan_or_inf_logits_gets_no_token_and_the_next_step_a_real_id(params):
    """NaN logits once gave a token (greedy: the kernel's V, past wte's last row) that the next step embedded."""
    logits = np.array([[0.0, np.nan, 1.0], [np.inf, 0.0, 1.0], [-np.inf] * 3, [-np.inf, 2.0, -np.inf]])
    token, out = np.full(4, 7, np.int32), np.full((4, 3), 7, np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dk.NumpyKernels(1e-5).sample(logits, np.array(params), np.array([0], np.int32), token, out)
    assert out[:, 1].tolist() == [NO_TOKEN, NO_TOKEN, NO_TOKEN, 1]  # out, for generate to refuse
    assert token.tolist() == [0, 0, 0, 1]


def test_order_key_orders_as_the_floats():
    for dtype in (np.float32, np.float64):
        values = np.array([-np.inf, -3.5, -1e-30, -0.0, 0.0, 1e-30, 2.0, 7.25, np.inf], dtype=dtype)
        keys = dk.order_key(values)
        assert (np.diff(keys.astype(np.float64)) >= 0).all() and keys[3] < keys[4]


# --- each kernel's twin against the composed ops ---

def test_layer_norm_matvec_and_lm_head_twins_match_the_ops():
    rng = np.random.default_rng(0)
    k = dk.NumpyKernels(eps=1e-5)
    x, w, b = rng.standard_normal((3, 37)), rng.standard_normal(37), rng.standard_normal(37)
    y = np.empty_like(x)
    k.layer_norm(x, w, b, y)
    np.testing.assert_allclose(y, ag.layer_norm(ag.Tensor(x), ag.Tensor(w), ag.Tensor(b)).data, rtol=1e-12, atol=1e-12)
    W, bias = rng.standard_normal((37, 11)), rng.standard_normal(11)  # 37 inputs: a ragged last slice
    plain = x @ W + bias
    for epilogue, expected in ((dk.PLAIN, plain), (dk.GELU, ag.Tensor(plain).gelu().data)):
        out = np.full((3, 11), np.nan)
        k.matvec(x, W, bias, out, epilogue)
        np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    residual = rng.standard_normal((3, 11))
    out = residual.copy()
    k.matvec(x, W, bias, out, dk.RESIDUAL)
    np.testing.assert_allclose(out, residual + plain, rtol=1e-12, atol=1e-12)
    wte, logits = rng.standard_normal((13, 37)), np.empty((3, 13))
    k.lm_head(x, wte, logits)
    np.testing.assert_allclose(logits, x @ wte.T, rtol=1e-12)
    padded = np.concatenate([wte, rng.standard_normal((51, 37))])  # a vocabulary padded to 64 rows: 13 scored
    logits = np.full((3, 13), np.nan)
    k.lm_head(x, padded, logits)
    np.testing.assert_allclose(logits, x @ wte.T, rtol=1e-12)


def test_attention_twin_writes_the_cache_and_matches_sdpa():
    rng = np.random.default_rng(1)
    B, nh, T, hs, p = 2, 3, 8, 4, 5
    keys, values = rng.standard_normal((B, nh, T, hs)), rng.standard_normal((B, nh, T, hs))
    qkv = rng.standard_normal((B, 3 * nh * hs))
    y = np.empty((B, nh * hs))
    dk.NumpyKernels(1e-5).attention(qkv, keys, values, np.array([p], np.int32), y)
    q, k, v = (qkv[:, i * nh * hs:(i + 1) * nh * hs].reshape(B, nh, 1, hs) for i in range(3))
    np.testing.assert_array_equal(keys[:, :, p:p + 1], k)
    np.testing.assert_array_equal(values[:, :, p:p + 1], v)
    expected = ag.scaled_dot_product_attention(ag.Tensor(q), ag.Tensor(keys[:, :, :p + 1]),
                                               ag.Tensor(values[:, :, :p + 1]), causal=True).data
    np.testing.assert_allclose(y, expected.reshape(B, nh * hs), rtol=1e-12)


# --- generate through the static path (GPT_DECODE=static runs the twins on the CPU) ---

@pytest.mark.parametrize("prompt_len", [1, 4, 11, 12])
def test_greedy_tokens_are_the_dynamic_caches_and_the_uncached_paths(prompt_len, monkeypatch):
    m = model()
    prompt = np.random.default_rng(prompt_len).integers(0, 40, size=(1, prompt_len))
    new = 12 - prompt_len + 4  # up to block_size + 1 tokens statically, the rest by the dynamic cache's window
    static = generate(m, prompt, new, "static", monkeypatch, temperature=0)
    assert (static == generate(m, prompt, new, "dynamic", monkeypatch, temperature=0)).all()
    assert (static == m.generate(prompt, new, temperature=0, use_cache=False)).all()


def test_float32_greedy_tokens_and_batches_of_equal_prompts(monkeypatch):
    m = model(dtype=np.float32)
    prompts = np.random.default_rng(5).integers(0, 40, size=(3, 4))
    static = generate(m, prompts, 9, "static", monkeypatch, temperature=0)
    assert static.shape == (3, 13)
    np.testing.assert_array_equal(static, generate(m, prompts, 9, "dynamic", monkeypatch, temperature=0))
    for row in range(3):  # each row as if alone
        np.testing.assert_array_equal(static[row], generate(m, prompts[row], 9, "static", monkeypatch, temperature=0))


def test_a_model_without_biases(monkeypatch):
    m = model(bias=False)
    assert generate(m, [[1, 2]], 8, "static", monkeypatch, temperature=0) == \
        generate(m, [[1, 2]], 8, "dynamic", monkeypatch, temperature=0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_padded_vocabulary_decodes_its_real_tokens_alone(dtype, monkeypatch):
    """wte has padded_vocab_size rows (pad_vocab_to=64, as --device cuda and --pad-vocab make); the logits and the
    sampled ids cover vocab_size alone."""
    m = model(dtype=dtype, vocab_size=13, pad_vocab_to=64)
    assert m.transformer.wte.weight.shape[0] == 64
    wte = m.transformer.wte.weight.data
    wte[13:] = 50 * wte[:13].sum(axis=0)  # padding rows the head would rank first were they scored
    prompts = np.random.default_rng(1).integers(0, 13, size=(2, 3))
    static = generate(m, prompts, 10, "static", monkeypatch, temperature=0)
    np.testing.assert_array_equal(static, generate(m, prompts, 10, "dynamic", monkeypatch, temperature=0))
    np.testing.assert_array_equal(static, m.generate(prompts, 10, temperature=0, use_cache=False))
    for options in (dict(temperature=1.0), dict(temperature=5.0, top_k=40, top_p=0.99), dict(temperature=1e-310)):
        ag.manual_seed(4)
        sampled = generate(m, prompts, 10, "static", monkeypatch, **options)
        assert sampled.shape == (2, 13) and sampled.min() >= 0 and sampled.max() < 13
    np.testing.assert_array_equal(sampled, static)  # a tiny temperature is greedy (no ties here)


def test_sampling_is_reproducible_keyed_by_the_seed_and_fresh_per_call(monkeypatch):
    m = model()
    options = dict(temperature=1.3, top_k=20, top_p=0.95)
    runs = []
    for seed in (7, 7, 8):
        ag.manual_seed(seed)
        runs.append(generate(m, [[3, 1, 4]], 9, "static", monkeypatch, **options))
    assert runs[0] == runs[1] and runs[0] != runs[2]
    ag.manual_seed(7)
    generate(m, [[3, 1, 4]], 9, "static", monkeypatch, **options)
    assert generate(m, [[3, 1, 4]], 9, "static", monkeypatch, **options) != runs[0]  # the generator moved on
    greedy = generate(m, [[3, 1, 4]], 9, "static", monkeypatch, temperature=0)
    assert generate(m, [[3, 1, 4]], 9, "static", monkeypatch, temperature=2.0, top_k=1) == greedy


@pytest.mark.parametrize("options", [dict(temperature=0), dict(temperature=0.9, top_k=20, top_p=0.9)])
def test_nan_logits_stop_the_static_path_at_the_token_the_dynamic_cache_names(options, monkeypatch):
    m = model()
    m.transformer.wpe.weight.data[5] = np.nan  # position 5's input predicts position 6: new token 5 after 2
    messages = []
    for how in ("static", "dynamic"):
        with pytest.raises(ValueError) as error:
            generate(m, [[1, 2]], 9, how, monkeypatch, **options)
        messages.append(str(error.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith("generate: the logits for new token 5 (position 6) hold NaN or inf, so no token "
                                  "can be drawn: transformer.wpe.weight holds 16 NaN or inf values")


def test_generate_makes_no_dynamic_cache_the_static_path_does_not_need(monkeypatch):
    """The static decoder keeps its own cache; on "cuda" a second one, zeroed at block_size, would only take memory."""
    made = []
    real = gpt2.KVCache

    def counted(config, batch_size, dtype, device):
        made.append(batch_size)
        return real(config, batch_size, dtype, device)
    monkeypatch.setattr(gpt2, "KVCache", counted)
    m = model()
    prompt = np.random.default_rng(3).integers(0, 40, size=(2, 4))
    static = generate(m, prompt, 9, "static", monkeypatch, temperature=0)  # 13 tokens = block_size + 1: all static
    assert made == [2]  # the decoder's, made once for this model and batch size
    assert generate(m, prompt, 11, "static", monkeypatch, temperature=0)[:, :13].tolist() == static.tolist()
    assert made == [2, 2]  # past block_size the dynamic cache slides the window
    np.testing.assert_array_equal(generate(m, prompt, 9, "dynamic", monkeypatch, temperature=0), static)
    assert made == [2, 2, 2]


def test_a_decoder_is_made_once_per_model_and_batch_and_again_for_new_weights(monkeypatch):
    m = model()
    generate(m, [[1, 2]], 3, "static", monkeypatch, temperature=0)
    first = decode._decoders[m][(1, np.dtype(np.float64))]
    generate(m, [[5]], 3, "static", monkeypatch, temperature=0)
    assert decode._decoders[m][(1, np.dtype(np.float64))] is first
    generate(m, [[5], [6]], 3, "static", monkeypatch, temperature=0)
    assert set(decode._decoders[m]) == {(1, np.dtype(np.float64)), (2, np.dtype(np.float64))}
    m.load_state_dict(model(seed=1).state_dict())  # new arrays: the old decoder's addresses are stale
    after = generate(m, [[1, 2]], 6, "static", monkeypatch, temperature=0)
    assert decode._decoders[m][(1, np.dtype(np.float64))] is not first
    assert after == generate(m, [[1, 2]], 6, "dynamic", monkeypatch, temperature=0)


def test_the_cpu_default_is_the_dynamic_cache_and_graph_mode_says_why_it_runs_eagerly(monkeypatch):
    monkeypatch.delenv("GPT_DECODE", raising=False)
    assert decode.mode("cpu") == "dynamic" and decode.mode("cuda") == "graph"
    m = model()
    with pytest.warns(RuntimeWarning, match="CUDA graphs need the 'cuda' device; running the decode kernels"):
        graphed = generate(m, [[2, 3]], 5, "graph", monkeypatch, temperature=0)
    assert graphed == generate(m, [[2, 3]], 5, "dynamic", monkeypatch, temperature=0)
    monkeypatch.setenv("GPT_DECODE", "fast")
    with pytest.raises(ValueError, match=r"GPT_DECODE='fast' is not one of dynamic, static, graph"):
        m.generate([[1]], 2)


def test_a_lora_model_keeps_the_dynamic_cache(monkeypatch):
    m = model()
    nn.lora(m, r=2, alpha=4, targets=("c_attn",))
    for p in m.parameters():
        p.data = p.data + 0.01  # nonzero adapters: the static kernels would miss them
    with pytest.warns(RuntimeWarning, match="no LoRA adapters"):
        static = generate(m, [[1, 2]], 5, "static", monkeypatch, temperature=0)
    assert static == m.generate([[1, 2]], 5, temperature=0, use_cache=False)


def test_a_model_of_mixed_dtypes_keeps_the_dynamic_cache(monkeypatch):
    m = model()
    m.transformer.h[1].ln_2.weight.data = m.transformer.h[1].ln_2.weight.data.astype(np.float32)
    assert not decode.supports(m)  # the CUDA module is compiled for wte's float64: it would read floats as doubles
    with pytest.warns(RuntimeWarning, match="one dtype for every weight"):
        static = generate(m, [[1, 2]], 5, "static", monkeypatch, temperature=0)
    assert static == m.generate([[1, 2]], 5, temperature=0, use_cache=False)


@pytest.mark.parametrize("how", ["static", "dynamic"])
def test_an_empty_batch_generates_no_tokens(how, monkeypatch):
    empty = np.zeros((0, 3), dtype=np.int64)
    assert generate(model(), empty, 4, how, monkeypatch).shape == (0, 7)


def test_the_attention_kernels_shared_memory_holds_the_block_size_with_its_scratch():
    # float32 at block_size 12,032: the dynamic scores and partial sums fill 48 KiB, and the static scratch is on top
    assert decode.supports(model(dtype=np.float32, block_size=12000))
    assert not decode.supports(model(dtype=np.float32, block_size=12032))


# --- the CUDA sources ---

@pytest.mark.cpu_only("compiles with NVRTC, which needs no GPU")
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_decode_kernels_compile_for_the_gpus_ci_names(arch, dtype):
    log = compile_cuda(dk.source(dtype), arch, "decode_kernels.cu")
    assert log is None, log


@pytest.mark.cpu_only("compiles with NVRTC, which needs no GPU")
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_kernels_block_fits_a_multiprocessors_registers(arch, dtype):
    """A launch of more registers than a block may have fails on the GPU only: "too many resources requested"."""
    used = registers(dk.source(dtype), arch, "decode_kernels.cu")
    assert set(used) == set(dk.THREADS)
    for kernel, count in used.items():
        assert count * dk.THREADS[kernel] <= REGISTERS_PER_BLOCK, (kernel, count, dk.THREADS[kernel])


@pytest.mark.cpu_only("compiles with NVRTC, which needs no GPU")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_supports_counts_the_attention_kernels_static_shared_memory(dtype):
    """A block asking for more than 48 KiB of shared memory, static and dynamic together, does not launch."""
    used = static_shared_memory(dk.source(dtype), "sm_90", "decode_kernels.cu")["attention"]
    assert used == dk.ATTENTION_SCRATCH * np.dtype(dtype).itemsize


@pytest.mark.cpu_only("compiles with NVRTC, which needs no GPU")
def test_the_compile_check_reports_nvrtcs_errors():
    log = compile_cuda(dk.source(np.float32) + "\n__global__ void broken() { undeclared = 1; }\n", "sm_90")
    assert '"undeclared" is undefined' in log


def test_the_source_refuses_other_dtypes():
    with pytest.raises(TypeError, match="dtype float16 is not supported"):
        dk.source(np.float16)


def test_graph_eager_and_cpu_give_the_same_tokens(device, monkeypatch):
    """float64 on both sides (no near-tie of float32 rounding can flip a greedy pick); float32: graph == eager."""
    shape = dict(block_size=64, vocab_size=300, n_embd=64, n_head=4)
    prompt = np.random.default_rng(2).integers(0, 300, size=(2, 5))
    m = model(**shape)
    cpu = generate(m, prompt, 70, "dynamic", monkeypatch, temperature=0)  # 70: past block_size as well
    m.to(device)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="decode:")  # the graph must be captured, not fall back
        graphed = generate(m, prompt, 70, "graph", monkeypatch, temperature=0)
    np.testing.assert_array_equal(graphed, cpu)
    np.testing.assert_array_equal(generate(m, prompt, 70, "static", monkeypatch, temperature=0), cpu)
    np.testing.assert_array_equal(generate(m, prompt, 70, "dynamic", monkeypatch, temperature=0), cpu)
    np.testing.assert_array_equal(m.generate(prompt, 70, temperature=0, use_cache=False), cpu)
    m32 = model(dtype=np.float32, **shape).to(device)
    for options in (dict(temperature=0), dict(temperature=0.9, top_k=50, top_p=0.9), dict(temperature=1.2)):
        runs = []
        for how in ("graph", "graph", "static"):
            ag.manual_seed(4)
            runs.append(generate(m32, prompt, 50, how, monkeypatch, **options))
        np.testing.assert_array_equal(runs[1], runs[0])
        np.testing.assert_array_equal(runs[2], runs[0])


def test_a_top_k_beyond_the_vocabulary_keeps_every_token_on_the_device(device, monkeypatch):
    """The kernel reads top_k as a C int: one past INT_MAX is clamped to V first, not cast (undefined in C)."""
    m = model(dtype=np.float32, vocab_size=300).to(device)
    runs = []
    for top_k in (None, 300, 2 ** 40):
        ag.manual_seed(4)
        runs.append(generate(m, [[3, 1, 4]], 30, "static", monkeypatch, temperature=1.5, top_k=top_k))
    assert runs[1] == runs[0] and runs[2] == runs[0]


def test_nan_logits_on_the_device_are_refused_at_the_token_the_cpu_names(device, monkeypatch):
    """On a GPU the check waits for the tokens' one copy to the host; the kernel feeds id 0 on, CuPy wraps -1."""
    m = model(dtype=np.float32)
    m.transformer.wpe.weight.data[5] = np.nan
    messages = []
    for where, how in (("cpu", "dynamic"), (device, "graph"), (device, "static"), (device, "dynamic")):
        m.to(where)
        for prompt in ([[1, 2]], [[1, 2]] * 3):  # within block_size; one row and three
            with pytest.raises(ValueError) as error:
                generate(m, prompt, 15, how, monkeypatch, temperature=0.9, top_p=0.9)  # 17 tokens: past block_size
            messages.append(str(error.value))
    assert messages[2:] == messages[:2] * 3 and "new token 5 (position 6 of row 0)" in messages[1]


def test_without_stream_capture_the_kernels_run_one_by_one_and_say_why(monkeypatch):
    class NoCapture:  # a stream as an old CuPy has it
        def begin_capture(self):
            raise NotImplementedError("this CuPy cannot capture")
    monkeypatch.setenv("GPT_DECODE", "static")
    m = model()
    expected = m.generate([[1, 2]], 6, temperature=0)
    decoder = decode._decoders[m][(1, np.dtype(np.float64))]
    decoder.capture, decoder.stream = True, NoCapture()
    with pytest.warns(RuntimeWarning, match=r"^decode: stream capture is unavailable \(NotImplementedError: this "
                                            r"CuPy cannot capture\); running the decode kernels one by one$"):
        assert m.generate([[1, 2]], 6, temperature=0) == expected
    assert not decoder.capture and decoder.graph is None
