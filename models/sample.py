"""python -m models.sample: continue a prompt with a trained model.

Reads a checkpoint folder written by `python -m models.train` (its
tokenizer.json says how to tokenise) or any Hugging Face GPT-2 folder
(config.json + model.safetensors; GPT-2's own tokenizer then).
"""
import json
import sys
from pathlib import Path

import autograd as ag
from models.cli import Parser
from models.gpt2 import GPT
from models.tokenizer import GPT2Tokenizer, tokenizer_from_dict


def parse_args(argv=None):
    p = Parser("python -m models.sample", __doc__.splitlines()[0])
    p.add_argument("checkpoint", nargs="?", default="out", help="a models.train output folder or a GPT-2 folder")
    p.add_argument("--prompt", default="\n", help="text to continue")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8, help="0 picks the most likely token (greedy)")
    p.add_argument("--top-k", type=int, default=None, help="sample only among the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="sample only within the top-p probability mass")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--num-samples", type=int, default=1)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--no-cache", action="store_true", help="recompute the whole prefix for every token")
    args = p.parse_args(argv)
    if args.max_new_tokens < 0 or args.num_samples < 1:
        p.error("--max-new-tokens cannot be negative and --num-samples must be at least 1")
    return args


def load(folder):
    """The model and the tokenizer that goes with it."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"no checkpoint in {folder}: expected config.json and model.safetensors "
                                "(train one with `python -m models.train`)")
    model = GPT.from_pretrained(folder)
    tokenizer_file = folder / "tokenizer.json"
    if tokenizer_file.is_file():
        tokenizer = tokenizer_from_dict(json.loads(tokenizer_file.read_text(encoding="utf-8")))
    else:
        tokenizer = GPT2Tokenizer()
    return model, tokenizer


def main(argv=None):
    args = parse_args(argv)
    try:
        model, tokenizer = load(args.checkpoint)
        prompt = tokenizer.encode(args.prompt)
    except (ValueError, FileNotFoundError, KeyError) as exc:
        print(f"sample: error: {exc}", file=sys.stderr)
        return 1
    if not prompt:
        print("sample: error: the prompt is empty after tokenisation; pass --prompt TEXT", file=sys.stderr)
        return 1
    model.to(args.device).eval()
    ag.manual_seed(args.seed)
    idx = ag.Tensor([prompt], device=args.device)
    for i in range(args.num_samples):
        out = model.generate(idx, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                             top_p=args.top_p, use_cache=not args.no_cache)
        if args.num_samples > 1:
            print(f"--- sample {i + 1} ---")
        print(tokenizer.decode(out.numpy()[0].tolist()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
