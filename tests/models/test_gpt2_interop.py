"""models.gpt2 against transformers' GPT2LMHeadModel (PyTorch) on a tiny random GPT-2:
the same checkpoint gives the same logits, loss, every gradient, AdamW trajectory and
greedy tokens; our checkpoints load in transformers with nothing missing, and the
original hub layout (no prefix, mask buffers) loads here."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import nn  # noqa: E402
from models.gpt.gpt2 import GPT  # noqa: E402

pytestmark = pytest.mark.interop

TINY = dict(n_layer=2, n_head=2, n_embd=32, n_positions=32, vocab_size=64,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new")
MASK_BUFFERS = (".attn.bias", ".attn.masked_bias")


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """A random GPT-2 saved by transformers as safetensors."""
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**TINY))
    folder = tmp_path_factory.mktemp("hf_gpt2")
    model.save_pretrained(folder, safe_serialization=True)
    assert (folder / "model.safetensors").is_file()
    return folder


def load_hf(folder):
    model = transformers.GPT2LMHeadModel.from_pretrained(folder)
    model.train()  # dropout is 0: train mode only keeps both sides alike
    return model


@pytest.fixture(scope="module")
def tokens():
    return np.random.default_rng(0).integers(0, TINY["vocab_size"], size=(2, 17))


def hf_loss(model, tokens):
    """transformers' own shifted loss: position t predicts token t + 1."""
    ids = torch.from_numpy(tokens)
    return model(ids, labels=ids).loss


def test_logits_loss_and_every_gradient_match(hf_folder, tokens):
    hf, ours = load_hf(hf_folder), GPT.from_pretrained(hf_folder)
    x, y = tokens[:, :-1], tokens[:, 1:]

    hf_logits = hf(torch.from_numpy(x)).logits
    logits, loss = ours(x, y)
    np.testing.assert_allclose(logits.data, hf_logits.detach().numpy(), atol=1e-4, rtol=0)

    reference = hf_loss(hf, tokens)
    reference.backward()
    loss.backward()
    np.testing.assert_allclose(loss.item(), reference.item(), rtol=1e-6, atol=1e-6)

    theirs = dict(hf.named_parameters())
    mine = dict(ours.named_parameters())
    assert set(theirs) == set(mine)  # lm_head.weight is tied, so torch lists it once, as wte
    for name, p in theirs.items():
        # Conv1D stores (in, out) like our Linear, so the gradients compare as they are
        np.testing.assert_allclose(mine[name].grad, p.grad.numpy(), rtol=1e-4, atol=2e-6, err_msg=name)


def test_adamw_trajectory_matches_torch(hf_folder, tokens):
    hf, ours = load_hf(hf_folder), GPT.from_pretrained(hf_folder)
    settings = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    torch_opt = torch.optim.AdamW(hf.parameters(), **settings)
    our_opt = nn.optim.AdamW(ours.parameters(), **settings)
    theirs, mine = [], []
    for _ in range(10):
        torch_opt.zero_grad()
        loss = hf_loss(hf, tokens)
        loss.backward()
        torch_opt.step()
        theirs.append(loss.item())

        our_opt.zero_grad()
        _, loss = ours(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        our_opt.step()
        mine.append(loss.item())
    assert mine[-1] < mine[0] - 0.01  # it does train
    np.testing.assert_allclose(mine, theirs, atol=1e-5, rtol=0)


def test_greedy_generation_matches_transformers(hf_folder, tokens):
    hf, ours = load_hf(hf_folder).eval(), GPT.from_pretrained(hf_folder)
    prompt = tokens[:, :6]
    expected = hf.generate(torch.from_numpy(prompt), attention_mask=torch.ones(prompt.shape, dtype=torch.long),
                           max_new_tokens=20, do_sample=False, pad_token_id=0).numpy()
    assert expected.shape == (2, 26)
    np.testing.assert_array_equal(ours.generate(prompt, 20, temperature=0), expected)
    np.testing.assert_array_equal(ours.generate(prompt, 20, temperature=0, use_cache=False), expected)


def test_our_checkpoint_loads_in_transformers(tmp_path, hf_folder, tokens):
    config = GPT.from_pretrained(hf_folder).config
    ours = GPT(config)  # fresh weights of our own, not the transformers ones
    ours.save_pretrained(tmp_path)
    hf, info = transformers.GPT2LMHeadModel.from_pretrained(tmp_path, output_loading_info=True)
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert [k for k in info[kind] if not str(k).endswith(MASK_BUFFERS)] == [], (kind, info[kind])
    assert not info["error_msgs"]
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()  # tied on their side too
    x = tokens[:, :-1]
    with torch.no_grad():
        expected = hf.eval()(torch.from_numpy(x)).logits.numpy()
    np.testing.assert_allclose(ours(x)[0].data, expected, atol=1e-4, rtol=0)


def test_original_hub_layout_loads(tmp_path, hf_folder, tokens):
    """The layout of openai-community/gpt2 on the hub: no `transformer.` prefix, causal-mask buffers."""
    from safetensors.numpy import load_file, save_file
    n = TINY["n_positions"]
    tensors = {k.removeprefix("transformer."): v for k, v in load_file(str(hf_folder / "model.safetensors")).items()}
    for i in range(TINY["n_layer"]):
        tensors[f"h.{i}.attn.bias"] = np.tril(np.ones((n, n), dtype=np.float32))[None, None]
        tensors[f"h.{i}.attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((hf_folder / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config))
    ours = GPT.from_pretrained(tmp_path)
    x = tokens[:, :-1]
    with torch.no_grad():
        expected = load_hf(hf_folder).eval()(torch.from_numpy(x)).logits.numpy()
    np.testing.assert_allclose(ours(x)[0].data, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_precision_checkpoint_loads_as_transformers_reads_it(tmp_path, hf_folder, tokens, dtype):
    """transformers' model saved in float16 or bfloat16 (as hub checkpoints often are) loads here, widened to
    float32, with the logits of the same half-precision weights run in float32."""
    half = load_hf(hf_folder).to(getattr(torch, dtype))
    half.save_pretrained(tmp_path, safe_serialization=True)
    ours = GPT.from_pretrained(tmp_path)
    assert ours.transformer.wte.weight.dtype == np.float32
    x = tokens[:, :-1]
    with torch.no_grad():
        expected = half.float().eval()(torch.from_numpy(x)).logits.numpy()
    np.testing.assert_allclose(ours(x)[0].data, expected, atol=1e-4, rtol=0)


def test_a_padded_vocabulary_keeps_parity_and_saves_the_checkpoints_rows(hf_folder, tokens, tmp_path):
    # TINY's 64 tokens padded to 128: wte grows, the loss and logits keep to the real 64
    hf, ours = load_hf(hf_folder), GPT.from_pretrained(hf_folder).pad_vocab(128)
    assert ours.transformer.wte.weight.shape == (128, TINY["n_embd"])
    x, y = tokens[:, :-1], tokens[:, 1:]
    logits, loss = ours(x, y)
    np.testing.assert_allclose(logits.data, hf(torch.from_numpy(x)).logits.detach().numpy(), atol=1e-4, rtol=0)
    reference = hf_loss(hf, tokens)
    reference.backward()
    loss.backward()
    np.testing.assert_allclose(loss.item(), reference.item(), rtol=1e-6, atol=1e-6)
    wte = ours.transformer.wte.weight.grad
    np.testing.assert_allclose(wte[:64], hf.transformer.wte.weight.grad.numpy(), rtol=1e-4, atol=2e-6)
    ours.save_pretrained(tmp_path / "padded")
    again, info = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "padded", output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert again.transformer.wte.weight.shape == (TINY["vocab_size"], TINY["n_embd"])


def _hf_logits(model, tokens):
    with torch.no_grad():
        return model.eval()(torch.from_numpy(tokens)).logits.numpy()


@pytest.mark.parametrize("variant", [
    {"activation_function": name}
    for name in ("gelu_pytorch_tanh", "gelu_fast", "gelu_python_tanh", "gelu_accurate")] + [
    {"n_inner": 4 * TINY["n_embd"]},
    {"reorder_and_upcast_attn": True},  # transformers takes that path in eager attention alone
    {"layer_norm_epsilon": 1e-3}, {"layer_norm_epsilon": 0.1},
], ids=str)
def test_a_config_variant_this_model_computes_gives_transformers_logits(tmp_path, tokens, variant):
    torch.manual_seed(0)
    config = transformers.GPT2Config(**{**TINY, **variant})
    config._attn_implementation = "eager"
    hf = transformers.GPT2LMHeadModel(config)
    hf.save_pretrained(tmp_path)
    np.testing.assert_allclose(GPT.from_pretrained(tmp_path)(tokens)[0].data, _hf_logits(hf, tokens),
                               atol=1e-5, rtol=0)


def test_a_config_spelling_the_sizes_by_their_generic_names_gives_transformers_logits(tmp_path, tokens):
    """num_attention_heads and the like are GPT2Config.attribute_map's names, which transformers reads; here 4 heads
    where n_head's default is 12 and the config.json also says n_head 1: transformers takes 4."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(**{**TINY, "n_embd": 48, "n_head": 4})
    hf = transformers.GPT2LMHeadModel(config)
    hf.save_pretrained(tmp_path)
    spelled = json.loads((tmp_path / "config.json").read_text())
    aliases = {"hidden_size": "n_embd", "max_position_embeddings": "n_positions", "num_attention_heads": "n_head",
               "num_hidden_layers": "n_layer"}
    spelled = {**{k: v for k, v in spelled.items() if k not in aliases.values()},
               **{alias: spelled[field] for alias, field in aliases.items()}, "n_head": 1}
    (tmp_path / "config.json").write_text(json.dumps(spelled))
    reread = transformers.GPT2LMHeadModel.from_pretrained(tmp_path)
    assert reread.config.n_head == 4
    np.testing.assert_allclose(GPT.from_pretrained(tmp_path)(tokens)[0].data, _hf_logits(reread, tokens),
                               atol=1e-5, rtol=0)


def test_a_sharded_checkpoint_transformers_wrote_loads(tmp_path, hf_folder, tokens):
    hf = load_hf(hf_folder)
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file() and not (tmp_path / "model.safetensors").exists()
    np.testing.assert_allclose(GPT.from_pretrained(tmp_path)(tokens)[0].data, _hf_logits(hf, tokens),
                               atol=1e-5, rtol=0)


def test_a_gpt2model_checkpoint_loads_with_the_head_tied_to_its_embedding(tmp_path, hf_folder, tokens):
    """GPT2Model saves the body alone, keys without the `transformer.` prefix: the logits are its last hidden
    state against the token embedding, as GPT2LMHeadModel computes them from that folder."""
    body = transformers.GPT2Model.from_pretrained(hf_folder)
    body.save_pretrained(tmp_path)
    with torch.no_grad():
        expected = (body.eval()(torch.from_numpy(tokens)).last_hidden_state @ body.wte.weight.T).numpy()
    np.testing.assert_allclose(GPT.from_pretrained(tmp_path)(tokens)[0].data, expected, atol=1e-5, rtol=0)


def test_load_state_dict_of_a_pytorch_gpt2_is_as_its_docstring_says(hf_folder):
    """The docstring gave a PyTorch GPT-2's state dict as a tied weight that loads under either name; GPT has no
    lm_head module, so strict refuses lm_head.weight and strict=False loads the rest (from_pretrained drops it)."""
    state = {k: v.numpy() for k, v in load_hf(hf_folder).state_dict().items() if not k.endswith(MASK_BUFFERS)}
    model = GPT.from_pretrained(hf_folder)
    with pytest.raises(KeyError, match=r"unexpected keys \['lm_head.weight'\]"):
        model.load_state_dict(state)
    assert model.load_state_dict(state, strict=False) == ([], ["lm_head.weight"])
    assert np.array_equal(model.transformer.wte.weight.numpy(), state["lm_head.weight"])
    assert "GPT.from_pretrained checks that it equals wte" in nn.Module.load_state_dict.__doc__
