"""python -m models.gpt2_params: where GPT-2's parameters are, tensor by tensor.

What this file promises:

* `parameter_shapes(config)`: every parameter's name and shape from the config
  alone, in `named_parameters()` order, without building the model.
* `count_parameters(config)`: their total (the tied LM head counted once).
* `parameter_table(config)` and the command: the printed breakdown, 124,439,808
  for GPT-2 small, with a note on where the illustrated article's table
  (124,410,624, GPT-2 small's only) goes astray; for another shape the note
  says what the same slips would give there, and that the article prints no
  such figure.
"""
import math
from dataclasses import asdict, replace

from models.cli import Parser
from models.gpt.gpt2 import GPTConfig


def parameter_shapes(config):
    """Name → shape of every parameter of GPT(config), in named_parameters() order, without building it."""
    C, V = config.n_embd, config.vocab_size
    block = {"ln_1.weight": (C,), "ln_1.bias": (C,),
             "attn.c_attn.weight": (C, 3 * C), "attn.c_attn.bias": (3 * C,),
             "attn.c_proj.weight": (C, C), "attn.c_proj.bias": (C,),
             "ln_2.weight": (C,), "ln_2.bias": (C,),
             "mlp.c_fc.weight": (C, 4 * C), "mlp.c_fc.bias": (4 * C,),
             "mlp.c_proj.weight": (4 * C, C), "mlp.c_proj.bias": (C,)}
    shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (config.block_size, C)}
    for i in range(config.n_layer):
        shapes.update({f"transformer.h.{i}.{name}": shape for name, shape in block.items()})
    shapes.update({"transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)})
    if not config.bias:
        shapes = {k: s for k, s in shapes.items() if not k.endswith(".bias")}
    return shapes


def count_parameters(config):
    """The number of parameters of GPT(config) (the tied LM head counted once, inside wte): one block's shapes
    counted n_layer times, so that a billion layers take no longer than one."""
    shapes = parameter_shapes(replace(config, n_layer=1))
    block = sum(math.prod(s) for name, s in shapes.items() if name.startswith("transformer.h.0."))
    return sum(math.prod(s) for s in shapes.values()) + (config.n_layer - 1) * block


def article_count(config):
    """The count with the illustrated article's two slips: mlp.c_fc's bias as n_embd (not 4·n_embd), no ln_f."""
    return count_parameters(config) - config.n_layer * 3 * config.n_embd - 2 * config.n_embd


def parameter_table(config):
    """The breakdown `python -m models.gpt2_params` prints, as text."""
    shapes = parameter_shapes(replace(config, n_layer=1))  # block 0 stands for every block
    L, C = config.n_layer, config.n_embd

    def line(label, shape_text, count, indent="  "):
        return f"{indent}{label:<{30 - len(indent)}}{shape_text:<26}{count:>14,}"

    def row(label, names, indent="  "):
        label = label if config.bias else label.replace(" + bias", "")
        found = [shapes[n] for n in names if n in shapes]
        count = sum(math.prod(s) for s in found)
        return line(label, " + ".join(str(s) for s in found), count, indent), count

    lines = [f"GPT-2 parameters: n_layer={L}, n_head={config.n_head}, n_embd={C}, "
             f"vocab_size={config.vocab_size}, block_size={config.block_size}, bias={config.bias}", "",
             f"  {'parameter':<28}{'shape':<26}{'count':>14}"]
    text, wte = row("wte (token embedding)", ["transformer.wte.weight"])
    lines.append(text + "   (also the LM head: tied)")
    text, wpe = row("wpe (position embedding)", ["transformer.wpe.weight"])
    lines += [text, f"  per block (transformer.h.0 … h.{L - 1}):"]
    block_rows = [("ln_1 weight + bias", ["ln_1.weight", "ln_1.bias"]),
                  ("attn.c_attn weight", ["attn.c_attn.weight"]), ("attn.c_attn bias", ["attn.c_attn.bias"]),
                  ("attn.c_proj weight + bias", ["attn.c_proj.weight", "attn.c_proj.bias"]),
                  ("ln_2 weight + bias", ["ln_2.weight", "ln_2.bias"]),
                  ("mlp.c_fc weight", ["mlp.c_fc.weight"]), ("mlp.c_fc bias", ["mlp.c_fc.bias"]),
                  ("mlp.c_proj weight + bias", ["mlp.c_proj.weight", "mlp.c_proj.bias"])]
    block = 0
    for label, names in block_rows:
        text, count = row(label, [f"transformer.h.0.{n}" for n in names], indent="    ")
        if count:
            lines.append(text)
        block += count
    lines += [line("one block", "", block, indent="    "), line(f"{L} blocks", "", L * block)]
    text, ln_f = row("ln_f weight + bias", ["transformer.ln_f.weight", "transformer.ln_f.bias"])
    lines.append(text)
    total = count_parameters(config)
    assert total == wte + wpe + L * block + ln_f
    lines.append(line("total", "", total))
    if config.bias:
        fc_bias_gap, ln_f_gap = L * 3 * C, 2 * C
        slips = article_count(config)
        if _is_gpt2_small(config):
            lines += ["", f"Note: the illustrated article's table totals {slips:,} for GPT-2 small. It counts "
                          f"mlp.c_fc's bias as {C:,} (n_embd)",
                      f"instead of {4 * C:,} (4·n_embd), {L} × {3 * C:,} = {fc_bias_gap:,} too few, and leaves out "
                      f"the final LayerNorm ln_f ({ln_f_gap:,}):",
                      f"{total:,} − {fc_bias_gap:,} − {ln_f_gap:,} = {slips:,}. "
                      "The count above is that of the actual parameter tensors."]
        else:
            small = GPTConfig()
            lines += ["", f"Note: the illustrated article tabulates GPT-2 small only ({article_count(small):,}, "
                          f"where the true count is {count_parameters(small):,}), not this shape.",
                      f"Its two slips, carried over to this shape, would give {slips:,}: mlp.c_fc's bias counted as "
                      f"n_embd instead of 4·n_embd",
                      f"({L} × {3 * C:,} = {fc_bias_gap:,} too few) and no final LayerNorm ln_f ({ln_f_gap:,}). "
                      "That figure is an extrapolation, not one the article prints."]
    return "\n".join(lines)


def _is_gpt2_small(config):
    """Whether `config` has GPT-2 small's parameter shapes (n_head does not change any of them)."""
    small = GPTConfig()
    return all(getattr(config, f) == getattr(small, f) for f in ("n_layer", "n_embd", "vocab_size", "block_size"))


def main(argv=None):
    parser = Parser("python -m models.gpt2_params", "GPT-2's parameter breakdown (GPT-2 small unless told otherwise).")
    defaults = GPTConfig()
    meanings = {"n_layer": "transformer blocks", "n_head": "attention heads per block",
                "n_embd": "the width: features per token", "vocab_size": "rows of the token embedding",
                "block_size": "context length: rows of the position embedding"}
    for field, meaning in meanings.items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=int, default=getattr(defaults, field), help=meaning)
    parser.add_argument("--no-bias", action="store_true", help="Linears and LayerNorms without biases")
    args = parser.parse_args(argv)
    try:
        config = GPTConfig(**{k: v for k, v in vars(args).items() if k in asdict(defaults)}, bias=not args.no_bias)
    except ValueError as exc:
        parser.error(str(exc))
    print(parameter_table(config))


if __name__ == "__main__":
    main()
