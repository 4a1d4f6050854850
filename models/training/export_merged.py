"""python -m models.export_merged CHECKPOINT OUT: a LoRA checkpoint's adapters folded into its base, as a plain
Hugging Face GPT-2 folder (config.json, model.safetensors and the tokenizer files) that transformers loads.

Each adapted layer's weight becomes W + B·A·alpha/r (nn.LoRALinear.merge), so
the folder gives the adapted model's logits. It has the base's context
(n_positions): LoRA freezes the position table, so a run with a shorter
--block-size keeps it whole. A checkpoint without adapters is copied out the
same way, with its own context. OUT appears whole or not at all.
"""
import sys
from pathlib import Path

import autograd as ag
from models.training import checkpoint
from models.cli import Parser, output_folder
from models.gpt.gpt2 import GPT
from models.io import atomic_path, owning_folder


def parse_args(argv=None):
    p = Parser("python -m models.export_merged", __doc__.split("\n\n")[0])
    p.add_argument("checkpoint", type=checkpoint.model_folder,
                   help="a models.train checkpoint folder (with LoRA adapters, or without: then copied)")
    p.add_argument("out", type=output_folder, help="the new Hugging Face folder; must not exist yet")
    args = p.parse_args(argv)
    if Path(args.out).exists():
        p.error(f"{args.out} exists; give a new folder to export into")
    owner = owning_folder(args.out, checkpoint.CHECKPOINT_MARKS + checkpoint.PREPARED_MARKS, itself=False)
    if owner is not None:
        p.error(f"{args.out} is inside {owner}, which holds a checkpoint, a model or a prepared corpus that the "
                "export would break; give it a folder of its own")
    return args


def merged(model):
    """A plain GPT with `model`'s function: every LoRA layer's update folded into its weight, no adapter keys."""
    with ag.seeded(0):  # its initialisation is overwritten at once
        plain = GPT(model.config)
    plain.load_state_dict(model.plain_weights())
    return plain


def main(argv=None):
    args = parse_args(argv)
    try:
        model, tokenizer = checkpoint.load_model(args.checkpoint)
        plain = merged(model)
        with atomic_path(args.out) as staging:
            staging.mkdir()
            plain.save_pretrained(staging)
            checkpoint.write_tokenizer(staging, tokenizer, plain.config.block_size)
    except (ValueError, OSError) as exc:
        print(f"export_merged: error: {exc}", file=sys.stderr)
        return 1
    what = "the adapters merged into the weights" if getattr(model, "lora_base", None) else "no adapters: copied as is"
    print(f"wrote {args.out}: {plain.num_parameters():,} parameters, context {plain.config.block_size} tokens, {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
