"""Greedy generation with a key/value cache, ours against PyTorch and transformers, each alone in its own process.

Run from the repository root, with nothing else busy:

    python -m benchmarks.generate                 # the main job's model: 63 tokens after 1 (all within block 64)
    python -m benchmarks.generate --model gpt2    # GPT-2 small: 256 tokens after a 16-token prompt

Every peer builds the model with random weights (float32) and generates greedily
with its KV cache: ours is `GPT.generate(..., temperature=0)` as it decodes by
default (the dynamic cache on the CPU, the static cache replayed as a CUDA
graph on "cuda"); "ours-kernels" launches the static path's kernels one by one
(GPT_DECODE=static; on the CPU, their NumPy twins) and "ours-dynamic" is the
dynamic cache on any device (GPT_DECODE=dynamic); with more than one of ours,
the report says whether their tokens agree (same seed, same weights). "torch" is
benchmarks/torch_reference.py's cached loop; "transformers" is
GPT2LMHeadModel.generate (skipped when transformers is missing). Each process
runs one untimed generation, then --repeats timed ones; the figure is new tokens
per second, the median over the rounds of each process's median. Prints; asserts nothing.
"""
import importlib.util
import os
import statistics
import time

import numpy as np

from benchmarks import alone

PEERS = ["ours", "ours-kernels", "ours-dynamic", "torch", "transformers"]
DEFAULT_PEERS = "ours,torch,transformers"
DECODE = {"ours-kernels": "static", "ours-dynamic": "dynamic"}  # GPT_DECODE of our variants
MODELS = {  # shape, prompt length, new tokens, timed generations per process
    "char": (dict(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128), 1, 63, 20),
    "gpt2": (dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768), 16, 256, 2),
}


def generator(peer, shape, prompt, device):
    """A function of the number of new tokens that generates greedily after `prompt`, returning the ids as NumPy."""
    if peer.startswith("ours"):
        if peer in DECODE:
            os.environ["GPT_DECODE"] = DECODE[peer]
        import autograd as ag
        from models.gpt.gpt2 import GPT, GPTConfig
        ag.keep_freed_memory()  # as models.sample does
        ag.manual_seed(0)
        model = GPT(GPTConfig(**shape)).to(device)
        ids = ag.Tensor(prompt, device=device)
        return lambda n: model.generate(ids, n, temperature=0).numpy()
    import torch
    torch.set_num_threads(alone.threads())
    torch.manual_seed(0)
    ids = torch.from_numpy(prompt).to(device)
    if peer == "torch":
        from benchmarks.torch_reference import GPT
        model = GPT(**shape).to(device).eval()
        return lambda n: model.generate(ids, n, temperature=0).cpu().numpy()
    import transformers
    config = transformers.GPT2Config(vocab_size=shape["vocab_size"], n_positions=shape["block_size"],
                                     n_layer=shape["n_layer"], n_head=shape["n_head"], n_embd=shape["n_embd"],
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new")
    model = transformers.GPT2LMHeadModel(config).to(device).eval()
    mask = torch.ones_like(ids)

    def generate(n):
        with torch.no_grad():
            return model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=n, min_new_tokens=n,
                                  pad_token_id=0).cpu().numpy()
    return generate


def main(argv=None):
    parser = alone.parser("python -m benchmarks.generate", __doc__.splitlines()[0], PEERS)
    parser.add_argument("--model", choices=sorted(MODELS), default="char",
                        help="the shape, random weights: the main job's (char) or GPT-2 small (gpt2)")
    parser.add_argument("--new-tokens", type=int, help="tokens to generate (default: 63 for char, 256 for gpt2)")
    parser.add_argument("--repeats", type=alone.COUNT, help="timed generations per process (default: 20 char, 2 gpt2)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where every peer generates")
    parser.set_defaults(peers=DEFAULT_PEERS)
    args = alone.parse_args(parser, argv)
    shape, prompt_len, new_tokens, repeats = MODELS[args.model]
    new_tokens, repeats = args.new_tokens or new_tokens, args.repeats or repeats
    prompt = np.random.default_rng(1).integers(0, shape["vocab_size"], size=(1, prompt_len))
    if args.peer:
        generate = generator(args.peer, shape, prompt, args.device)
        generate(new_tokens)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            ids = generate(new_tokens)
            times.append(time.perf_counter() - start)
        assert ids.shape == (1, prompt_len + new_tokens), ids.shape
        alone.emit(args.peer, {"tokens_per_s": new_tokens / statistics.median(times), "tokens": ids[0].tolist()})
        return
    if "transformers" in args.peers and importlib.util.find_spec("transformers") is None:
        args.peers = ",".join(p for p in args.peers.split(",") if p != "transformers")
        print("transformers is not installed: its peer is skipped (pip install -e \".[interop]\")")
    print(f"greedy generation with a KV cache, {args.model} model ({shape['n_layer']} layers, {shape['n_embd']} wide, "
          f"vocabulary {shape['vocab_size']}): {new_tokens} new tokens after {prompt_len}, batch 1, float32 on "
          f"{args.device}; {args.threads} thread(s) per peer, {repeats} timed generations per process")
    results = alone.run("benchmarks.generate", args, argv)
    alone.report(results, "tokens_per_s", "new tokens per second", "tokens/s", higher_is_better=True)
    ours = [(peer, r["tokens"]) for peer, runs in results.items() if peer.startswith("ours") for r in runs]
    for peer, tokens in ours[1:]:
        differ = [i for i, (a, b) in enumerate(zip(ours[0][1], tokens)) if a != b]
        print(f"  {peer} against {ours[0][0]}: " + (f"the same {len(tokens)} tokens" if not differ else
              f"first different token at position {differ[0]} (where products round differently, e.g. TF32 "
              "matmuls against fp32 kernels, a near-tie of random weights may flip)"))


if __name__ == "__main__":
    main()
