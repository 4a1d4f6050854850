"""python -m models.sample: continue a prompt with a trained model.

Reads a checkpoint folder written by `python -m models.train` (its
gptgrad_tokenizer.json says how to tokenise) or any Hugging Face GPT-2 folder
(config.json + model.safetensors; GPT-2's own tokenizer then). The prompt is
--prompt's text or the whole of --prompt-file's (nanoGPT's FILE:path).
"""

import os
import sys

import numpy as np

import autograd as ag
from models.training import checkpoint
from models.cli import SEEDS, Parser, device, input_file, interval
from models.gpt import sampling
from models.training.data import load_text


def parse_args(argv=None):
    p = Parser("python -m models.sample", __doc__.splitlines()[0])
    p.add_argument("checkpoint", nargs="?", default="out", type=checkpoint.model_folder,
                   help="a models.train output folder or a GPT-2 folder")
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", default="\n", help="text to continue")
    prompt.add_argument("--prompt-file", type=input_file, default=None, metavar="PATH",
                        help="continue the text of this UTF-8 file instead (default: none, --prompt)")
    p.add_argument("--max-new-tokens", type=interval(int, "[0, inf)"), default=200,
                   help="tokens to generate after the prompt")
    p.add_argument("--temperature", type=interval(float, "[0, inf)"), default=0.8,
                   help="0 picks the most likely token (greedy)")
    p.add_argument("--top-k", type=interval(int, "[1, inf)"), default=None,
                   help="sample only among the k most likely tokens (default: none, among all)")
    p.add_argument("--top-p", type=interval(float, "(0, 1]"), default=None,
                   help="sample only within the top-p probability mass (default: none, within all of it)")
    p.add_argument("--seed", type=interval(int, SEEDS), default=1337,
                   help="seeds the sampling draws: the same seed, the same text (on one device and GPT_DECODE mode)")
    p.add_argument("--num-samples", type=interval(int, "[1, inf)"), default=1,
                   help="how many continuations of the prompt to print")
    p.add_argument("--device", type=device, default="cpu", metavar="{cpu,cuda}",
                   help="where the model runs (cuda: the GPU, through CuPy)")
    p.add_argument("--no-cache", action="store_true", help="recompute the whole prefix for every token")
    args = p.parse_args(argv)
    try:  # argv's own bytes, as UTF-8: under a locale that is not (LC_ALL=C), Python keeps them as surrogates
        args.prompt = os.fsencode(args.prompt).decode("utf-8")
    except UnicodeDecodeError as exc:
        p.error(f"--prompt holds bytes that are not UTF-8 (at byte {exc.start}); pass UTF-8 text, or put "
                "the text in a file and convert it (iconv -t utf-8) for --prompt-file")
    # refused here, not once the model has loaded: only an empty text has no tokens (and load_text refuses an
    # empty --prompt-file before the model loads)
    if not args.prompt:
        p.error("--prompt is empty; give it some text to continue")
    try:
        sampling.check_fits_memory(1, 1 + args.max_new_tokens, "--max-new-tokens")
    except ValueError as exc:
        p.error(str(exc))
    return args


def main(argv=None):
    ag.keep_freed_memory()  # each token reuses freed arrays rather than faulting in fresh pages (see its docstring)
    args = parse_args(argv)
    # a character the output's encoding lacks (PYTHONIOENCODING=ascii) is written escaped, not an error after the
    # work is done
    if hasattr(sys.stdout, "reconfigure"):  # a text file's; a stand-in (io.StringIO) encodes nothing
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        # read and encoded before the weights load, so that a prompt the model cannot read is refused at once
        text = args.prompt if args.prompt_file is None else load_text(args.prompt_file, "--prompt-file")
        tokenizer = checkpoint.load_tokenizer(args.checkpoint)
        try:
            prompt = tokenizer.encode(text)
        except ValueError:
            if args.prompt_file is None and text == "\n":  # --prompt's default: the user gave no text to leave out
                raise ValueError(f"the default prompt, a newline, is not in the vocabulary of the model in "
                                 f"{args.checkpoint} (its text had none); give --prompt, text of its characters"
                                 ) from None
            raise
        model = checkpoint.load_weights(args.checkpoint)
        model.to(args.device).eval()
        ag.manual_seed(args.seed)
        idx = ag.Tensor([prompt], device=args.device)
        for i in range(args.num_samples):
            with np.errstate(over="ignore", invalid="ignore"):  # overflow on the way to NaN logits: generate says it
                out = model.generate(idx, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                                     top_p=args.top_p, use_cache=not args.no_cache)
            if args.num_samples > 1:
                print(f"--- sample {i + 1} ---")
            print(tokenizer.decode(out.numpy()[0].tolist()))
    except BrokenPipeError:  # `| head`: the reader has gone; models.doors.run_main ends the command quietly
        raise
    except (ValueError, OSError) as exc:
        print(f"sample: error: {exc}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"sample: error: out of memory for {args.max_new_tokens} new tokens; ask for fewer", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
