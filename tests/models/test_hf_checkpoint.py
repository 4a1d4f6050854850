"""Tests for models.hf_checkpoint through GPT.from_pretrained / save_pretrained: the round trip,
both Hugging Face layouts, sharded weights, the tied head, clear errors, atomic saves.
transformers itself reads and writes these folders in test_gpt2_interop.py."""

import json
import os
import re

import numpy as np
import pytest

from models.gpt.gpt2 import GPT, GPTConfig
from models.gpt.gpt2_params import parameter_shapes
from models.gpt.hf_checkpoint import config_to_hf
from tests.autograd._helpers import assert_streams_untouched
from tests.models.test_gpt2 import TINY, batch, tiny


def _files(directory):
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_save_and_load_round_trip(tmp_path):
    model = tiny(vocab_size=20, block_size=6, n_layer=2, n_head=2, n_embd=8, layer_norm_epsilon=1e-6)
    model.save_pretrained(tmp_path / "ckpt")
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["architectures"] == ["GPT2LMHeadModel"]
    assert config["tie_word_embeddings"] is True and config["activation_function"] == "gelu_new"
    assert (config["n_positions"], config["n_embd"], config["layer_norm_epsilon"]) == (6, 8, 1e-6)
    from safetensors import safe_open
    with safe_open(str(tmp_path / "ckpt" / "model.safetensors"), "np") as f:
        assert f.metadata() == {"format": "pt"}
        assert set(f.keys()) == set(parameter_shapes(model.config))
    loaded = GPT.from_pretrained(tmp_path / "ckpt")
    assert loaded.config == model.config
    for (name, p), q in zip(model.named_parameters(), loaded.parameters()):
        np.testing.assert_array_equal(p.data, q.data, err_msg=name)
    x, _ = batch(model.config, T=6)
    np.testing.assert_array_equal(model(x)[0].data, loaded(x)[0].data)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no staging folder left behind


def test_a_bias_free_model_round_trips(tmp_path):
    model = tiny(bias=False)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["bias"] is False
    loaded = GPT.from_pretrained(tmp_path)
    assert loaded.config == model.config
    x, _ = batch(model.config)
    np.testing.assert_array_equal(model(x)[0].data, loaded(x)[0].data)


def test_loading_leaves_the_callers_seed_and_every_random_stream_as_they_were(tmp_path, monkeypatch):
    tiny().save_pretrained(tmp_path)
    assert_streams_untouched(lambda: GPT.from_pretrained(tmp_path), monkeypatch)


def test_original_hub_layout_loads(tmp_path):
    from safetensors.numpy import save_file
    model = tiny()
    n = model.config.block_size
    tensors = {name.removeprefix("transformer."): p.data for name, p in model.named_parameters()}
    for i in range(model.config.n_layer):
        tensors[f"h.{i}.attn.bias"] = np.tril(np.ones((n, n), dtype=np.float32))[None, None]
        tensors[f"h.{i}.attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(model.config)))
    loaded = GPT.from_pretrained(tmp_path)
    x, _ = batch(model.config)
    np.testing.assert_array_equal(model(x)[0].data, loaded(x)[0].data)


def test_sharded_checkpoint_loads(tmp_path):
    from safetensors.numpy import save_file
    model = tiny()
    tensors = {name: p.data for name, p in model.named_parameters()}
    names = list(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:10], "model-00002-of-00002.safetensors": names[10:]}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(tmp_path / shard), metadata={"format": "pt"})
    weight_map = {k: shard for shard, keys in shards.items() for k in keys}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(model.config)))
    loaded = GPT.from_pretrained(tmp_path)
    for (name, p), q in zip(model.named_parameters(), loaded.parameters()):
        np.testing.assert_array_equal(p.data, q.data, err_msg=name)


def test_tied_lm_head_is_accepted_only_when_equal(tmp_path):
    from safetensors.numpy import save_file
    model = tiny()
    tensors = {name: p.data for name, p in model.named_parameters()}
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(model.config)))
    wte, weights = tensors["transformer.wte.weight"], str(tmp_path / "model.safetensors")
    save_file({**tensors, "lm_head.weight": wte.copy()}, weights)
    GPT.from_pretrained(tmp_path)
    save_file({**tensors, "lm_head.weight": wte + 1}, weights)
    with pytest.raises(ValueError, match="lm_head.weight differs"):
        GPT.from_pretrained(tmp_path)


def test_checkpoint_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="no folder"):
        GPT.from_pretrained(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        GPT.from_pretrained(tmp_path)
    model = tiny()
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(model.config)))
    with pytest.raises(FileNotFoundError, match="model.safetensors is missing"):
        GPT.from_pretrained(tmp_path)
    model.save_pretrained(tmp_path)
    wider = config_to_hf(GPTConfig(**{**TINY, "n_embd": 16}))
    (tmp_path / "config.json").write_text(json.dumps(wider))
    with pytest.raises(ValueError, match=r"config.json does not describe the weights beside it: "
                                         r"n_embd 16 \(the weights have 8\)"):
        GPT.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**wider, "activation_function": "relu"}))
    with pytest.raises(ValueError, match='activation_function="relu"'):
        GPT.from_pretrained(tmp_path)


@pytest.mark.parametrize("field, value, said", [
    ("n_layer", 1_000_000_000, "n_layer 1000000000 (the weights have 2)"),
    ("n_positions", 10**12, "block_size 1000000000000 (the weights have 8)"),
    ("vocab_size", 7, "vocab_size 7 (the weights have 16)"),
])
def test_config_sizes_are_checked_against_the_weights_before_a_model_is_built(tmp_path, monkeypatch, field, value,
                                                                              said):
    tiny().save_pretrained(tmp_path)
    hf = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**hf, field: value}))
    monkeypatch.setattr(GPT, "__init__", lambda self, config: pytest.fail("a model was built"))
    with pytest.raises(ValueError, match=re.escape(said)):
        GPT.from_pretrained(tmp_path)


@pytest.mark.parametrize("field, value, said", [
    ("activation_function", "gelu", 'activation_function="gelu" (this model computes GPT-2\'s tanh GELU: "gelu_new", '
                                    '"gelu_pytorch_tanh", "gelu_fast", "gelu_python_tanh", "gelu_accurate")'),
    ("activation_function", "relu", 'activation_function="relu" (this model computes GPT-2\'s tanh GELU: '),
    ("n_inner", 16, "n_inner=16 (the MLP here is 4 × n_embd wide: null or 32)"),
    ("n_inner", "32", 'n_inner="32" (the MLP here is 4 × n_embd wide: null or 32)'),
    ("scale_attn_weights", False, "scale_attn_weights=false (attention here scales by 1/√head_size: true)"),
    ("scale_attn_weights", None, "scale_attn_weights=null (attention here scales by 1/√head_size: true)"),
    ("scale_attn_by_inverse_layer_idx", True,
     "scale_attn_by_inverse_layer_idx=true (every layer here scales alike: false)"),
    ("add_cross_attention", True, "add_cross_attention=true (this model is a decoder alone: false)"),
    ("tie_word_embeddings", False, "tie_word_embeddings=false (the LM head here is the token embedding: true)"),
])
def test_a_config_this_model_does_not_compute_is_refused_naming_the_field_its_value_and_ours(
        tmp_path, monkeypatch, field, value, said):
    tiny().save_pretrained(tmp_path)
    hf = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**hf, field: value}))
    monkeypatch.setattr(GPT, "__init__", lambda self, config: pytest.fail("a model was built"))
    with pytest.raises(ValueError) as error:
        GPT.from_pretrained(tmp_path)
    assert str(error.value).startswith(f"{tmp_path / 'config.json'}: from_pretrained: config.json asks for what "
                                       "this GPT-2 does not implement: " + said)
    assert str(error.value).endswith("; run such a variant in transformers' GPT2LMHeadModel")


@pytest.mark.parametrize("field, value", [
    ("activation_function", "gelu_python_tanh"), ("activation_function", "gelu_accurate"),  # the same tanh GELU
    ("n_inner", None), ("n_inner", 32), ("reorder_and_upcast_attn", True),
])
def test_a_config_spelling_what_this_model_computes_loads_with_the_same_logits(tmp_path, field, value):
    model = tiny()
    model.save_pretrained(tmp_path)
    hf = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**hf, field: value}))
    x, _ = batch(model.config)
    np.testing.assert_array_equal(GPT.from_pretrained(tmp_path)(x)[0].data, model(x)[0].data)

@pytest.mark.parametrize("alias, field", [("num_attention_heads", "n_head"), ("hidden_size", "n_embd"),
                                          ("num_hidden_layers", "n_layer"), ("max_position_embeddings", "n_positions")])
def test_a_size_spelled_by_its_generic_name_is_read_as_transformers_reads_it(tmp_path, alias, field):
    """GPT2Config.attribute_map: transformers reads num_attention_heads as n_head (and so on), and where a
    config.json spells both, the generic name wins; n_head was left at 12 or taken from the other spelling."""
    model = tiny()
    model.save_pretrained(tmp_path)
    hf = json.loads((tmp_path / "config.json").read_text())
    value = hf.pop(field)
    (tmp_path / "config.json").write_text(json.dumps({**hf, alias: value}))
    x, _ = batch(model.config)
    assert GPT.from_pretrained(tmp_path).config == model.config
    (tmp_path / "config.json").write_text(json.dumps({**hf, field: 1, alias: value}))
    loaded = GPT.from_pretrained(tmp_path)
    assert loaded.config == model.config
    np.testing.assert_array_equal(loaded(x)[0].data, model(x)[0].data)


@pytest.mark.parametrize("model_type", ["gpt_neo", "llama", None])
def test_another_model_type_is_refused_naming_the_field_and_the_fix(tmp_path, monkeypatch, model_type):
    tiny().save_pretrained(tmp_path)
    hf = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**hf, "model_type": model_type}))
    monkeypatch.setattr(GPT, "__init__", lambda self, config: pytest.fail("a model was built"))
    with pytest.raises(ValueError) as error:
        GPT.from_pretrained(tmp_path)
    assert str(error.value) == (f"{tmp_path / 'config.json'}: from_pretrained: config.json has "
                                f"model_type={json.dumps(model_type)}, and this model loads GPT-2 alone "
                                '(model_type "gpt2"); give a GPT2LMHeadModel or GPT2Model folder')


def _refusal(folder, tensors, hf):
    """GPT.from_pretrained's error for `folder` holding the safetensors `tensors` and the config.json dict `hf`."""
    from safetensors.numpy import save_file
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(hf))
    with pytest.raises(ValueError) as error:
        GPT.from_pretrained(folder)
    return str(error.value)


def test_missing_and_unexpected_keys_are_named_with_the_folder(tmp_path):
    """The advice was load_state_dict's, "pass strict=False", which from_pretrained takes no argument for."""
    model = tiny()
    tensors = {name: p.data for name, p in model.named_parameters() if name != "transformer.ln_f.bias"}
    tensors["h.0.attn.rotary"] = np.zeros(2, np.float32)
    assert _refusal(tmp_path, tensors, config_to_hf(model.config)) == (
        f"GPT.from_pretrained: the weights in {tmp_path} do not fit its config.json ({model.config}): missing keys "
        "['transformer.ln_f.bias'], unexpected keys ['transformer.h.0.attn.rotary']; a GPT-2 folder holds every "
        'parameter of the model its config.json describes and no other tensor (config.json says "bias": false for a '
        "model without biases): save or download the folder again")


def test_a_bias_free_model_whose_config_lost_its_bias_field_names_the_field(tmp_path):
    GPT(GPTConfig(**TINY, bias=False)).save_pretrained(tmp_path)
    hf = json.loads((tmp_path / "config.json").read_text())
    del hf["bias"]
    (tmp_path / "config.json").write_text(json.dumps(hf))
    with pytest.raises(ValueError) as error:
        GPT.from_pretrained(tmp_path)
    message = str(error.value)
    assert "missing keys ['transformer.h.0.ln_1.bias', 'transformer.h.0.attn.c_attn.bias', " in message
    assert "unexpected keys" not in message and "strict=False" not in message
    assert message.endswith('(config.json says "bias": false for a model without biases): save or download the '
                            "folder again")


@pytest.mark.parametrize("key", ["score.weight", "transformer.score.weight"])
def test_another_heads_weights_are_refused_as_the_file_names_them(tmp_path, key):
    """A GPT2ForSequenceClassification folder: its score.weight is named as written, not as transformer.score.weight
    with strict=False's advice (from_pretrained takes no strict)."""
    from safetensors.numpy import save_file
    model = tiny()
    tensors = {name: p.data for name, p in model.named_parameters()}
    save_file({**tensors, key: np.zeros((2, TINY["n_embd"]), np.float32)}, str(tmp_path / "model.safetensors"))
    config = {**config_to_hf(model.config), "architectures": ["GPT2ForSequenceClassification"]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as error:
        GPT.from_pretrained(tmp_path)
    assert str(error.value) == (f"GPT.from_pretrained: the weights in {tmp_path} hold {key}, which GPT-2's "
                                "language model has no place for (config.json's architectures: "
                                "['GPT2ForSequenceClassification']); give a GPT2LMHeadModel or GPT2Model folder")


def _write_raw_safetensors(path, tensors):
    """A safetensors file written byte by byte: {name: (safetensors dtype, shape, raw little-endian bytes)}, for
    the types NumPy cannot hand to safetensors.numpy (bfloat16, float8)."""
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def test_bfloat16_weights_load_widened_exactly_to_float32(tmp_path):
    model = tiny()
    tensors, expected = {}, {}
    for name, p in model.named_parameters():  # each weight cut to bfloat16: the upper 16 bits of its float32
        upper = (p.data.astype(np.float32).view(np.uint32) >> 16).astype("<u2")
        tensors[name] = ("BF16", p.shape, upper.tobytes())
        expected[name] = (upper.astype(np.uint32) << 16).view(np.float32)
    _write_raw_safetensors(tmp_path / "model.safetensors", tensors)
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(model.config, "bfloat16")))
    loaded = GPT.from_pretrained(tmp_path)
    for name, p in loaded.named_parameters():
        assert p.dtype == np.float32
        np.testing.assert_array_equal(p.data, expected[name], err_msg=name)
    for name, p in model.named_parameters():  # bfloat16 keeps 8 of float32's 24 significant bits
        np.testing.assert_allclose(expected[name], p.data, rtol=2 ** -7, atol=0, err_msg=name)


def test_a_tensor_type_numpy_lacks_is_refused_naming_it(tmp_path):
    model = tiny()
    tensors = {name: ("F32", p.shape, p.data.astype("<f4").tobytes()) for name, p in model.named_parameters()}
    tensors["transformer.h.1.attn.c_proj.weight"] = ("F8_E4M3", (8, 8), bytes(64))
    _write_raw_safetensors(tmp_path / "model.safetensors", tensors)
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(model.config)))
    with pytest.raises(ValueError) as error:
        GPT.from_pretrained(tmp_path)
    assert str(error.value) == (f"GPT.from_pretrained: {tmp_path / 'model.safetensors'} holds "
                                "transformer.h.1.attn.c_proj.weight as F8_E4M3, which NumPy cannot read; save the "
                                "weights as float32, float16 or bfloat16")


def test_linear_weights_saved_transposed_are_refused_saying_so(tmp_path):
    """A nanoGPT state dict has GPT-2's names but PyTorch's nn.Linear layout, (out, in): the error sent the user
    to config.json ("check the model's config matches the checkpoint's"), where nothing was wrong."""
    model = tiny()
    linears = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    tensors = {name: p.data.T.copy() if name.endswith(linears) else p.data for name, p in model.named_parameters()}
    assert _refusal(tmp_path, tensors, config_to_hf(model.config)) == (
        f"GPT.from_pretrained: the weights in {tmp_path} hold transformer.h.0.attn.c_attn.weight as (24, 8), the "
        "transpose of GPT-2's (8, 24) (and 5 more): they were saved (out, in), as PyTorch's nn.Linear keeps them (a "
        "nanoGPT state dict, say), where GPT-2's checkpoints hold (in, out); transpose every Linear's weight "
        "(attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) before saving")


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _edit_config(change):
    def edit(folder):
        path = folder / "config.json"
        path.write_text(json.dumps(change(json.loads(path.read_text()))))
    return edit


def _shard_with_a_copy(folder, name):
    """Shards a and b that both hold `name`, b another value of it: read silently, whatever the index said."""
    from safetensors.numpy import load_file, save_file
    tensors = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    wpe = tensors.pop("transformer.wpe.weight")
    save_file(tensors, str(folder / "a.safetensors"))
    save_file({"transformer.wpe.weight": wpe, name: tensors[name] + 1}, str(folder / "b.safetensors"))
    weight_map = {**{key: "a.safetensors" for key in tensors}, "transformer.wpe.weight": "b.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def _layers_of_nothing(folder):
    """998 more layers, each a zero-size tensor: the model of config.json's n_layer was built before any check."""
    from safetensors.numpy import load_file, save_file
    tensors = load_file(str(folder / "model.safetensors"))
    tensors.update({f"transformer.h.{i}.ln_1.weight": np.zeros(0, np.float32) for i in range(2, 1000)})
    save_file(tensors, str(folder / "model.safetensors"))
    _edit_config(lambda hf: {**hf, "n_layer": 1000})(folder)


def _one_wide_row(folder):
    """wte and wpe of one row 10^5 wide (800 KB): n_embd 10^5 asked for 2.4·10^11 parameters."""
    for name in ("transformer.wte.weight", "transformer.wpe.weight"):
        _rewrite_weights(folder, change=(name, np.zeros((1, 10 ** 5), np.float32)))
    _edit_config(lambda hf: {**hf, "vocab_size": 1, "n_positions": 1, "n_embd": 10 ** 5})(folder)


def _shard(folder, weight_map):
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


@pytest.mark.parametrize("damage, message", [
    (lambda f: _truncate(f / "model.safetensors"),
     "model.safetensors is not a whole safetensors file (Error while deserializing header"),
    (lambda f: (f / "model.safetensors").write_bytes(b"PK\x03\x04 a zip, say"),
     "model.safetensors is not a whole safetensors file"),
    (lambda f: (f / "config.json").write_text('["gpt2"]'),
     "config.json should hold a JSON object {...}, but holds an array"),
    (lambda f: _truncate(f / "config.json"), "config.json is not valid JSON"),
    (_edit_config(lambda hf: {**hf, "n_layer": "2"}),
     "config.json: GPTConfig: n_layer must be a positive integer, got '2'"),
    (_edit_config(lambda hf: {**hf, "n_embd": None}),
     "config.json: GPTConfig: n_embd must be a positive integer, got None"),
    (_edit_config(lambda hf: {**hf, "layer_norm_epsilon": "small"}),
     "config.json: GPTConfig: layer_norm_epsilon must be a positive number, got 'small'"),
    (lambda f: _shard(f, ["model-00001-of-00001.safetensors"]),
     "model.safetensors.index.json should map tensor names to shard files in 'weight_map'"),
    (lambda f: _shard(f, {"transformer.wte.weight": "model-00002-of-00002.safetensors"}),
     "model-00002-of-00002.safetensors is missing"),
    (lambda f: _shard(f, {"transformer.wte.weight": "/dev/zero"}),
     "names the shard '/dev/zero', which is not a file name in its folder"),
    (lambda f: _shard(f, {"transformer.wte.weight": "../other/model.safetensors"}),
     "names the shard '../other/model.safetensors', which is not a file name in its folder"),
    (lambda f: _shard(f, {"transformer.wte.weight": ".."}), "names the shard '..', which is not a file name"),
    (_edit_config(lambda hf: {**hf, "bias": "no"}), "config.json's \"bias\" should be true or false, not 'no'"),
    (_edit_config(lambda hf: {**hf, "bias": 0}), "config.json's \"bias\" should be true or false, not 0"),
    (_edit_config(lambda hf: {**hf, "bias": None}), "config.json's \"bias\" should be true or false, not None"),
    (_edit_config(lambda hf: {**hf, "n_layer": 1000000000}),
     "config.json does not describe the weights beside it: n_layer 1000000000 (the weights have 2)"),
    (_edit_config(lambda hf: {**hf, "vocab_size": 10 ** 12}),
     "config.json does not describe the weights beside it: vocab_size 1000000000000 (the weights have 11)"),
    (_edit_config(lambda hf: {**hf, "n_positions": 10 ** 9, "n_embd": 10 ** 6}),
     "n_embd 1000000 (the weights have 8); block_size 1000000000 (the weights have 8)"),
    (_edit_config(lambda hf: {**hf, "n_head": 10 ** 9}),
     "config.json: GPTConfig: n_embd=8 is not divisible by n_head=1000000000"),
    (_edit_config(lambda hf: {**hf, "layer_norm_epsilon": float("nan")}),
     "config.json: GPTConfig: layer_norm_epsilon must be a positive number, got nan"),
    (lambda f: (f / "config.json").write_text("[" * 100000 + "]" * 100000),
     "config.json nests arrays or objects more than 64 deep"),
    (lambda f: (f / "config.json").write_text('{"a": ' + "[" * 65 + "]" * 65 + "}"),
     "config.json nests arrays or objects more than 64 deep"),
    (lambda f: os.truncate(f / "config.json", 300 * 2 ** 20),
     "config.json is 314,572,800 bytes, more than the 268,435,456 a JSON file here may have"),
    (lambda f: _rewrite_weights(f, drop="transformer.wte.weight"),
     "model.safetensors: transformer.wte.weight is missing; GPT-2's weights hold it as a 2-D table"),
    (lambda f: _rewrite_weights(f, change=("transformer.wpe.weight", np.zeros(8, np.float32))),
     "model.safetensors: transformer.wpe.weight has shape (8,)"),
    (lambda f: _rewrite_weights(f, change=("transformer.h.1.mlp.c_fc.bias", np.full(32, np.nan, np.float32))),
     "the weights in {folder} are damaged: transformer.h.1.mlp.c_fc.bias holds NaN or infinite values"),
    (lambda f: _rewrite_weights(f, change=("transformer.wte.weight", np.full((11, 8), -np.inf, np.float32))),
     "the weights in {folder} are damaged: transformer.wte.weight holds NaN or infinite values"),
    (lambda f: _shard_with_a_copy(f, "transformer.ln_f.bias"),
     "GPT.from_pretrained: {folder} holds transformer.ln_f.bias in both a.safetensors and b.safetensors; each tensor "
     "lives in one shard"),
    (_layers_of_nothing, "config.json describes a model of 872,168 parameters, more than twice the 1,912 values of "
                         "the weights beside it, where a GPT-2 folder's weights hold every parameter of its model"),
    (_one_wide_row, "config.json describes a model of 240,003,000,000 parameters, more than twice the 201,760 values "
                    "of the weights beside it"),
])
def test_a_broken_file_is_one_line_naming_it(tmp_path, damage, message, monkeypatch):
    tiny(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8).save_pretrained(tmp_path)
    damage(tmp_path)
    built = []
    monkeypatch.setattr(GPT, "__init__", lambda self, config: built.append(config))
    with pytest.raises((ValueError, FileNotFoundError)) as error:
        GPT.from_pretrained(tmp_path)
    text = str(error.value)
    assert message.replace("{folder}", str(tmp_path)) in text and str(tmp_path) in text and "\n" not in text
    assert built == []  # refused before a model was built


def _rewrite_weights(folder, drop=None, change=None):
    from safetensors.numpy import load_file, save_file
    tensors = {k: v for k, v in load_file(str(folder / "model.safetensors")).items() if k != drop}
    if change:
        tensors[change[0]] = change[1]
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


@pytest.mark.parametrize("bias", [True, False])
def test_config_bias_is_read_as_a_bool_and_builds_what_it_says(tmp_path, bias):
    tiny(bias=bias).save_pretrained(tmp_path)
    loaded = GPT.from_pretrained(tmp_path)
    assert loaded.config.bias is bias
    assert any(name.endswith(".bias") for name, _ in loaded.named_parameters()) is bias


@pytest.mark.parametrize("bias", ["no", "false", 0, 1, None, [False]])
def test_gptconfig_refuses_a_bias_that_is_not_a_bool(bias):
    with pytest.raises(ValueError, match=f"GPTConfig: bias must be True or False, got {re.escape(repr(bias))}"):
        GPTConfig(bias=bias)


@pytest.mark.parametrize("config", [dict(), dict(bias=False), dict(vocab_size=3, block_size=1, n_layer=1, n_head=1,
                                                                   n_embd=1), dict(n_layer=3, n_embd=48, n_head=6)])
def test_num_parameters_counts_what_gpt_builds(config):
    c = GPTConfig(**config)
    assert c.num_parameters() == GPT(c).num_parameters()
    assert GPTConfig(n_layer=10 ** 7).num_parameters() > 7 * 10 ** 13  # counted, not built


class _Interrupted(Exception):
    pass


def _failing_save_file(tensors, filename, metadata=None):
    """Writes half a file, then fails: a full disk, or a kill in the middle of the write."""
    with open(filename, "wb") as f:
        f.write(b"\x00" * 100)
    raise _Interrupted


def test_an_interrupted_save_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    import safetensors.numpy
    target = tmp_path / "ckpt"
    tiny(seed=0).save_pretrained(target)
    (target / "tokenizer.json").write_text("{}")  # other files in the folder are left alone
    before = _files(target)
    monkeypatch.setattr(safetensors.numpy, "save_file", _failing_save_file)
    with pytest.raises(_Interrupted):
        tiny(seed=1).save_pretrained(target)
    assert _files(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    with pytest.raises(_Interrupted):
        tiny(seed=1).save_pretrained(tmp_path / "fresh")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no half-made folder either
    monkeypatch.undo()
    tiny(seed=1).save_pretrained(target)  # a save that completes replaces both files
    after = _files(target)
    assert after["tokenizer.json"] == b"{}" and after["model.safetensors"] != before["model.safetensors"]
    np.testing.assert_array_equal(GPT.from_pretrained(target).transformer.wte.weight.data,
                                  tiny(seed=1).transformer.wte.weight.data)
