"""GPT-2 checkpoints in Hugging Face's folder format: config.json + model.safetensors.

What this file promises:

* `read(directory)`: the weights (under this model's parameter names), checked
  against its config.json (`read_config`), of a folder that transformers wrote (keys `transformer.h.0…`,
  perhaps a tied `lm_head.weight`) or of the original hub layout (keys `h.0…`
  with `attn.bias` / `attn.masked_bias` mask buffers, which are dropped).
  Sharded weights (`model.safetensors.index.json`, whose shards must be files
  of the folder itself, each tensor in one of them) load too. Weights may be
  any floating type NumPy has, or bfloat16 (NumPy has none: widened, exactly,
  to float32). Every size in config.json is checked against the weights'
  shapes before a model is built from them, and weights that are not finite
  are refused; a file that is missing, cut short, not JSON or not an object,
  or a tensor of a type NumPy cannot read (float8), is named in one line.
* `save(model, directory, weights)`: config.json and model.safetensors as transformers
  writes them, each file atomically; `transformers.GPT2LMHeadModel` loads the
  folder with nothing missing.
* `read_config(directory)`: the GPTConfig fields alone, from config.json, with
  no weight read (what a command checks its options against before loading).
* `config_fields` / `config_to_hf`: GPTConfig's fields from transformers' GPT-2
  config.json, refusing what this model cannot compute, and back.
* `save_tokenizer(tokenizer, directory, max_length)`: tokenizer.json and
  tokenizer_config.json in the `tokenizers` library's format, so that
  `transformers.AutoTokenizer.from_pretrained(directory)` gives the same ids:
  GPT-2's byte-level BPE as GPT-2's own files, a character tokenizer as a BPE
  with one token per character and no merges.

`GPT.from_pretrained` and `GPT.save_pretrained` (models/gpt/gpt2.py) build on
this module, which knows the files and nothing of the model's code.
"""
import json
import os
import re
from pathlib import Path

import numpy as np

from models.io import atomic_path, read_json
from models.gpt.tokenizer import END_OF_TEXT, CharTokenizer, GPT2Tokenizer

HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
_MASK_BUFFER = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")  # the original layout's causal-mask buffers
_BODY = re.compile(r"^(wte|wpe|ln_f|h\.\d+)\.")  # the keys of GPT2Model's own tensors, without "transformer."
# safetensors' types that NumPy reads, and bfloat16 (what transformers saves a bfloat16 model in), which NumPy has
# no dtype for and read_safetensors_file widens to float32 itself
_READABLE_DTYPES = ("BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F16", "BF16", "F32", "F64", "C64")
# the names transformers gives the tanh GELU, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))); "gelu" is the erf one
_TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python_tanh", "gelu_accurate")
# GPT2Config.attribute_map: transformers reads these generic names as GPT-2's own fields, and where a config.json
# spells both, the generic one wins
_ALIASES = {"hidden_size": "n_embd", "max_position_embeddings": "n_positions", "num_attention_heads": "n_head",
            "num_hidden_layers": "n_layer"}


def config_fields(hf):
    """GPTConfig's fields (all but dropout) from a transformers GPT-2 config.json dict; refuses what this model
    cannot compute, naming each field, its value and the one this model computes. A size spelled by its generic
    name (num_attention_heads, hidden_size, …) is read as transformers reads it. GPTConfig checks the values
    themselves. reorder_and_upcast_attn is accepted: it only moves the 1/√head_size scaling before the query-key
    product and computes that product in float32, which is the same attention for the float32 weights loaded here."""
    if hf.get("model_type", "gpt2") != "gpt2":
        raise ValueError(f"from_pretrained: config.json has model_type={json.dumps(hf['model_type'])}, and this "
                         "model loads GPT-2 alone (model_type \"gpt2\"); give a GPT2LMHeadModel or GPT2Model folder")
    hf = {**hf, **{name: hf[alias] for alias, name in _ALIASES.items() if alias in hf}}
    fields = {"vocab_size": hf.get("vocab_size", 50257), "block_size": hf.get("n_positions", hf.get("n_ctx", 1024)),
              "n_layer": hf.get("n_layer", 12), "n_head": hf.get("n_head", 12), "n_embd": hf.get("n_embd", 768),
              "bias": hf.get("bias", True),  # "bias" is ours: only bias=False folders have it
              "layer_norm_epsilon": hf.get("layer_norm_epsilon", 1e-5)}
    if not isinstance(fields["bias"], bool):
        raise ValueError(f"from_pretrained: config.json's \"bias\" should be true or false, not {fields['bias']!r}")
    n_embd = fields["n_embd"]
    width = f" or {4 * n_embd}" if isinstance(n_embd, int) else ""

    def asked(name):  # the field as config.json spells it: "relu", null, false
        return f"{name}={json.dumps(hf[name])}"
    unsupported = []
    if hf.get("activation_function", "gelu_new") not in _TANH_GELUS:
        unsupported.append(f"{asked('activation_function')} (this model computes GPT-2's tanh GELU: "
                           + ", ".join(json.dumps(name) for name in _TANH_GELUS) + ")")
    if hf.get("n_inner") is not None and not (isinstance(n_embd, int) and hf["n_inner"] == 4 * n_embd):
        unsupported.append(f"{asked('n_inner')} (the MLP here is 4 × n_embd wide: null{width})")
    if not hf.get("scale_attn_weights", True):
        unsupported.append(f"{asked('scale_attn_weights')} (attention here scales by 1/√head_size: true)")
    if hf.get("scale_attn_by_inverse_layer_idx", False):
        unsupported.append(f"{asked('scale_attn_by_inverse_layer_idx')} (every layer here scales alike: false)")
    if hf.get("add_cross_attention", False):
        unsupported.append(f"{asked('add_cross_attention')} (this model is a decoder alone: false)")
    if not hf.get("tie_word_embeddings", True):
        unsupported.append(f"{asked('tie_word_embeddings')} (the LM head here is the token embedding: true)")
    if unsupported:
        raise ValueError("from_pretrained: config.json asks for what this GPT-2 does not implement: "
                         + "; ".join(unsupported) + "; run such a variant in transformers' GPT2LMHeadModel")
    return fields


def config_to_hf(config, dtype="float32"):
    """The config.json dict transformers' GPT2LMHeadModel needs to rebuild `config`."""
    eos = 50256 if config.vocab_size > 50256 else None  # GPT-2's <|endoftext|>, only if the vocabulary has it
    extra = {} if config.bias else {"bias": False}  # not a transformers field: this model's own extension
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "n_positions": config.block_size,
        "n_embd": config.n_embd,
        "n_layer": config.n_layer,
        "n_head": config.n_head,
        "n_inner": None,
        "activation_function": "gelu_new",
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout,
        "layer_norm_epsilon": config.layer_norm_epsilon,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "use_cache": True,
        "bos_token_id": eos,
        "eos_token_id": eos,
        "tie_word_embeddings": True,
        "dtype": dtype,
        **extra,
    }


def read_config(directory):
    """GPTConfig's fields (config_fields) of the Hugging Face folder `directory`, from its config.json alone: what
    the model is, known before a weight is read."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"GPT.from_pretrained: no folder {directory}; give the folder that holds "
                                "config.json and model.safetensors (e.g. `huggingface-cli download gpt2`)")
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"GPT.from_pretrained: {config_file} is missing; a Hugging Face GPT-2 folder "
                                "has config.json next to model.safetensors")
    hf = read_json(config_file)
    try:
        return config_fields(hf)
    except ValueError as exc:
        raise ValueError(f"{config_file}: {exc}") from None


def read(directory):
    """The weights of the Hugging Face folder `directory`, under this model's parameter names, checked against its
    config.json (read_config)."""
    fields = read_config(directory)
    directory = Path(directory)
    state, head = _state_and_head(_read_safetensors(directory), directory)
    if head is not None and not np.array_equal(head, state.get("transformer.wte.weight")):
        raise ValueError(f"GPT.from_pretrained: lm_head.weight differs from transformer.wte.weight in {directory}; "
                         "this model ties its LM head to the token embedding, as GPT-2 does")
    _check_sizes(fields, state, directory / "config.json")
    for name, array in state.items():
        if array.dtype.kind != "f":  # an int8 or bool table would be cast to float32 without a word
            raise ValueError(f"the weights in {directory} are damaged: {name} is {array.dtype}, where GPT-2's "
                             "weights are floating point")
        if not np.isfinite(array).all():
            raise ValueError(f"the weights in {directory} are damaged: {name} holds NaN or infinite values")
    return state


def _check_sizes(fields, state, config_file):
    """config.json's sizes against the weights' shapes, before anything is built from them (an untrusted folder
    could ask for a billion layers)."""
    for key in ("transformer.wte.weight", "transformer.wpe.weight"):  # the tables that say the sizes
        if key not in state or state[key].ndim != 2:
            what = f"has shape {state[key].shape}" if key in state else "is missing"
            raise ValueError(f"{config_file.parent / 'model.safetensors'}: {key} {what}; GPT-2's weights hold "
                             "it as a 2-D table, whose shape config.json's sizes are checked against")
    found = {}
    found["vocab_size"], found["n_embd"] = state["transformer.wte.weight"].shape
    found["block_size"] = state["transformer.wpe.weight"].shape[0]
    layers = {int(m.group(1)) for key in state if (m := re.match(r"transformer\.h\.(\d+)\.", key))}
    found["n_layer"] = len(layers)
    wrong = [f"{name} {fields[name]!r} (the weights have {size})" for name, size in found.items()
             if isinstance(fields[name], int) and fields[name] != size]  # GPTConfig vets the types
    if layers != set(range(len(layers))):
        wrong.append(f"layers numbered {sorted(layers)[:8]}… (the weights skip some)")
    if wrong:
        raise ValueError(f"{config_file} does not describe the weights beside it: " + "; ".join(wrong))


def _read_safetensors(directory):
    """Every tensor of model.safetensors (or of the shards its index names) as NumPy arrays."""
    single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
    if single.is_file():
        return read_safetensors_file(single)
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(shard, str) for shard in weight_map.values()):
            raise ValueError(f"GPT.from_pretrained: {index} should map tensor names to shard files in 'weight_map'")
        outside = next((shard for shard in weight_map.values() if Path(shard).name != shard or shard in ("", "..")),
                       None)
        if outside is not None:  # a folder names only its own files: no path is read that a download chose
            raise ValueError(f"GPT.from_pretrained: {index} names the shard {outside!r}, which is not a file name "
                             "in its folder; shards are read from the folder itself")
        tensors, source = {}, {}
        for shard in sorted(set(weight_map.values())):
            for name, array in read_safetensors_file(directory / shard).items():
                if name in source:  # one of the two would be dropped without a word, whichever the index names
                    raise ValueError(f"GPT.from_pretrained: {directory} holds {name} in both {source[name]} and "
                                     f"{shard}; each tensor lives in one shard: save or download the folder again")
                tensors[name], source[name] = array, shard
        return tensors
    others = sorted(p.name for p in directory.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".h5", ".msgpack"))
    hint = (f" (found {', '.join(others)}: convert them with transformers, "
            "`GPT2LMHeadModel.from_pretrained(folder).save_pretrained(folder)`)") if others else ""
    raise FileNotFoundError(f"GPT.from_pretrained: {single} is missing; only safetensors weights are read{hint}")


def read_safetensors_file(path):
    """The tensors of one safetensors file, bfloat16 ones as float32; a one-line error when it is missing, cut
    short or not safetensors, or holds a tensor of a type NumPy has no dtype for (float8), naming it."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise FileNotFoundError(f"GPT.from_pretrained: {path} is missing")
    try:
        with safe_open(str(path), framework="np") as file:
            dtypes = {name: file.get_slice(name).get_dtype() for name in file.keys()}
            unreadable = [name for name, dtype in dtypes.items() if dtype not in _READABLE_DTYPES]
            tensors = {} if unreadable else {name: file.get_tensor(name) for name, dtype in dtypes.items()
                                             if dtype != "BF16"}
        if not unreadable:
            tensors.update(_bfloat16_as_float32(path, [name for name, dtype in dtypes.items() if dtype == "BF16"]))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ValueError(f"GPT.from_pretrained: {path} is not a whole safetensors file ({exc}); "
                         "save or download it again") from None
    if unreadable:
        raise ValueError(f"GPT.from_pretrained: {path} holds {unreadable[0]} as {dtypes[unreadable[0]]}, which "
                         "NumPy cannot read; save the weights as float32, float16 or bfloat16")
    return tensors


def _bfloat16_as_float32(path, names):
    """The bfloat16 tensors `names` of the safetensors file `path` (whose header safetensors has checked) as
    float32. A bfloat16 is the upper half of the float32 of the same value, so widening it is exact: its 16
    bits go on top of 16 zero bits."""
    arrays = {}
    with open(path, "rb") as file:
        size = int.from_bytes(file.read(8), "little")
        header = json.loads(file.read(size))
        for name in names:
            begin, end = header[name]["data_offsets"]
            file.seek(8 + size + begin)
            halves = np.frombuffer(file.read(end - begin), dtype="<u2")
            arrays[name] = (halves.astype(np.uint32) << 16).view(np.float32).reshape(header[name]["shape"])
    return arrays


def _state_and_head(tensors, directory):
    """The checkpoint's tensors under this model's parameter names (mask buffers dropped), and its lm_head.weight.
    A key that is neither the body's (with or without "transformer.") nor lm_head.weight belongs to another head
    (GPT2ForSequenceClassification's score.weight, say): refused as the file spells it."""
    state, head, foreign = {}, None, []
    for key, array in tensors.items():
        name = key.removeprefix("transformer.")
        if key == "lm_head.weight":
            head = array
        elif not _BODY.match(name):
            foreign.append(key)
        elif not _MASK_BUFFER.match(name):
            state[f"transformer.{name}"] = array
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise ValueError(f"GPT.from_pretrained: the weights in {directory} hold {', '.join(foreign[:3])}{more}, which "
                         f"GPT-2's language model has no place for (config.json's architectures: "
                         f"{read_json(directory / 'config.json').get('architectures', 'not given')}); give a "
                         "GPT2LMHeadModel or GPT2Model folder")
    return state, head


def save(model, directory, weights):
    """Write config.json and `weights` (name → NumPy array) as model.safetensors into `directory` as transformers
    does, atomically.

    A new folder is made under a temporary name and appears whole or not at all;
    into a folder that is there, each file is written whole under a temporary
    name and then takes its own (models.io.atomic_path, for both): an
    interrupted save leaves the previous files, never half a file. Other files
    in `directory` (a tokenizer, say) are left alone. A model with bias=False is
    saved too, marked "bias": false in config.json: `read` reads it back, but
    transformers' GPT-2 always has biases and cannot.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"save_pretrained: {directory} exists and is not a folder")
    if directory.exists():
        _write(model, directory, weights)
        return
    with atomic_path(directory) as staging:
        staging.mkdir()
        _write(model, staging, weights)


def _write(model, directory, weights):
    from safetensors import SafetensorError
    from safetensors.numpy import save_file

    tensors = {name: np.ascontiguousarray(array) for name, array in weights.items()}  # transformer.…
    wte = "transformer.wte.weight"
    tensors[wte] = np.ascontiguousarray(tensors[wte][:model.config.vocab_size])  # a padded vocabulary's real rows
    path = directory / "model.safetensors"
    with atomic_path(path) as tmp:
        try:
            save_file(tensors, str(tmp), metadata={"format": "pt"})
        except SafetensorError as exc:  # its own error for what the system refused (a full disk): an OSError here
            code = re.search(r"\(os error (\d+)\)", str(exc))
            if code is None:
                raise OSError(f"could not write {path}: {exc}") from None
            raise OSError(int(code[1]), os.strerror(int(code[1])), str(path)) from None
    dtype = str(model.transformer.wte.weight.dtype)
    with atomic_path(directory / "config.json") as tmp:
        tmp.write_text(json.dumps(config_to_hf(model.config, dtype), indent=2) + "\n")


def save_tokenizer(tokenizer, directory, max_length):
    """Write Hugging Face's tokenizer.json and tokenizer_config.json for `tokenizer` into `directory`, each file
    atomically; False (nothing written) for a tokenizer they have no form for here (a lesson's own byte BPE)."""
    if isinstance(tokenizer, GPT2Tokenizer):
        tokens, merges = tokenizer.tokens_and_merges()
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        special = [{"id": tokenizer.eot_token, "content": END_OF_TEXT, "single_word": False, "lstrip": False,
                    "rstrip": False, "normalized": False, "special": True}] if tokenizer.eot_token is not None else []
        model = {"vocab": {token: i for i, token in tokens.items()}, "merges": [f"{a} {b}" for a, b in merges]}
        files = {"tokenizer.json": {"added_tokens": special, "pre_tokenizer": byte_level, "decoder": byte_level,
                                    "model": model},
                 "tokenizer_config.json": {"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": False,
                                           **{name: END_OF_TEXT for name in ("bos_token", "eos_token", "unk_token")
                                              if special}}}
    elif isinstance(tokenizer, CharTokenizer):
        model = {"vocab": {ch: i for i, ch in enumerate(tokenizer.chars)}, "merges": []}
        files = {"tokenizer.json": {"added_tokens": [], "pre_tokenizer": None, "decoder": {"type": "Fuse"},
                                    "model": model},  # no pre-tokenizer: the whole text is one word of characters
                 "tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast"}}
    else:
        return False
    bpe = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
           "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False}
    files["tokenizer.json"] = {"version": "1.0", "truncation": None, "padding": None, "normalizer": None,
                               "post_processor": None, **files["tokenizer.json"],
                               "model": {**bpe, **files["tokenizer.json"]["model"]}}
    files["tokenizer_config.json"]["model_max_length"] = max_length
    for name, content in files.items():
        with atomic_path(Path(directory) / name) as tmp:
            tmp.write_text(json.dumps(content, ensure_ascii=False, indent=1), encoding="utf-8")
    return True
