"""GPT-2 small on our engine beside PyTorch: a training step, and generation with and without the KV cache.

Run from the repository root:  python -m benchmarks.gpt2 [--quick] [--repeats N] [--profile]

(a) forward + backward of the GPT-2 small architecture (random weights, float32)
    at batch 1 × 128 tokens: ours against a nanoGPT-style PyTorch model defined
    below, which gets the same weights (so both compute the same loss).
(b) greedy generation of 256 new tokens from a 16-token prompt, in tokens/s:
    ours with the KV cache, ours without it, PyTorch recomputing the whole prefix
    every step (nanoGPT's generate loop) and, when transformers is installed,
    GPT2LMHeadModel.generate with its own KV cache.

Every peer runs in this one process, on the same weights, with as many threads
as NumPy's BLAS uses (set OPENBLAS_NUM_THREADS=1 for single-threaded figures);
timed runs alternate between peers so that a busy machine slows all of them alike.
Figures are medians; ratios are ours / theirs in time. Prints; asserts nothing.
`--profile` adds a cProfile of our forward + backward (where the time goes).
"""

import argparse
import cProfile
import io
import os
import pstats
import statistics
import time

import numpy as np

import autograd as ag
from models.gpt2 import GPT, GPTConfig


def blas_threads():
    """How many threads NumPy's BLAS runs: threadpoolctl if installed, else the usual variables, else all cores."""
    try:
        from threadpoolctl import threadpool_info
        counts = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
        if counts:
            return counts[0]
    except ImportError:
        pass
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return os.cpu_count()


# ---- the PyTorch peer: GPT-2 as nanoGPT writes it, weights stored (in, out) like GPT-2's Conv1D ----------


def torch_gpt(model):
    """A PyTorch GPT-2 holding copies of `model`'s weights (same names, same layout)."""
    import torch
    import torch.nn.functional as F

    config = model.config

    class Linear(torch.nn.Module):
        def __init__(self, n_in, n_out):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.empty(n_in, n_out))
            self.bias = torch.nn.Parameter(torch.empty(n_out))

        def forward(self, x):
            return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            C = config.n_embd
            self.ln_1, self.ln_2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
            self.attn = torch.nn.Module()
            self.attn.c_attn, self.attn.c_proj = Linear(C, 3 * C), Linear(C, C)
            self.mlp = torch.nn.Module()
            self.mlp.c_fc, self.mlp.c_proj = Linear(C, 4 * C), Linear(4 * C, C)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, config.n_head, -1).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
            x = x + self.attn.c_proj(y)
            return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))

    class TorchGPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = torch.nn.Module()
            self.transformer.wte = torch.nn.Embedding(config.vocab_size, config.n_embd)
            self.transformer.wpe = torch.nn.Embedding(config.block_size, config.n_embd)
            self.transformer.h = torch.nn.ModuleList(Block() for _ in range(config.n_layer))
            self.transformer.ln_f = torch.nn.LayerNorm(config.n_embd)

        def forward(self, idx, targets=None):
            t = self.transformer
            x = t.wte(idx) + t.wpe(torch.arange(idx.shape[1]))
            for block in t.h:
                x = block(x)
            x = t.ln_f(x)
            if targets is None:  # inference: only the last position's logits, as nanoGPT does
                return x[:, -1] @ t.wte.weight.T
            logits = x @ t.wte.weight.T
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

        @torch.no_grad()
        def generate(self, idx, max_new_tokens):
            for _ in range(max_new_tokens):  # nanoGPT's loop: the whole (cropped) prefix every step
                logits = self(idx[:, -config.block_size:])
                idx = torch.cat([idx, logits.argmax(dim=-1, keepdim=True)], dim=1)
            return idx

    peer = TorchGPT()
    peer.load_state_dict({name: torch.from_numpy(p.data.copy()) for name, p in model.named_parameters()})
    return peer


def transformers_gpt(model):
    """transformers' GPT2LMHeadModel with `model`'s weights, or None without transformers."""
    try:
        import torch
        import transformers
    except ImportError:
        return None
    c = model.config
    config = transformers.GPT2Config(vocab_size=c.vocab_size, n_positions=c.block_size, n_layer=c.n_layer,
                                     n_head=c.n_head, n_embd=c.n_embd, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0, activation_function="gelu_new")
    hf = transformers.GPT2LMHeadModel(config).eval()
    hf.load_state_dict({name: torch.from_numpy(p.data.copy()) for name, p in model.named_parameters()}, strict=False)
    hf.tie_weights()
    return hf


# ---- timing ----------------------------------------------------------------------------------------


def interleaved(runs, repeats, warm_up=None):
    """Median seconds of each named callable, alternating between them, after one untimed warm-up call each."""
    for name, run in runs.items():
        (warm_up or runs)[name]()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def forward_backward(model, peer, batch, seq, repeats, profile):
    import torch

    tokens = np.random.default_rng(0).integers(0, model.config.vocab_size, size=(batch, seq + 1))
    x, y = tokens[:, :-1], tokens[:, 1:]
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def ours():
        model.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        return loss.item()

    def theirs():
        peer.zero_grad(set_to_none=True)
        loss = peer(tx, ty)
        loss.backward()
        return loss.item()

    print(f"\n(a) forward + backward, batch {batch} × {seq} tokens; median of {repeats}")
    print(f"    loss: ours {ours():.6f}, PyTorch {theirs():.6f} (same weights)")
    medians = interleaved({"ours": ours, "PyTorch": theirs}, repeats)
    for name, seconds in medians.items():
        print(f"    {name:<10}{seconds * 1e3:10.1f} ms")
    print(f"    ours / PyTorch: {medians['ours'] / medians['PyTorch']:.2f}× the time")
    if profile:
        profiler = cProfile.Profile()
        profiler.runcall(ours)
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(14)
        print("\n    cProfile of our forward + backward (by own time):")
        print("\n".join("    " + line for line in text.getvalue().splitlines() if line.strip()))


def generation(model, peer, hf, prompt_len, new_tokens, repeats):
    import torch

    prompt = np.random.default_rng(1).integers(0, model.config.vocab_size, size=(1, prompt_len))
    mask = torch.ones(prompt.shape, dtype=torch.long)
    generators = {  # name → function of the number of new tokens, returning prompt + new tokens
        "ours, KV cache": lambda n: model.generate(prompt, n, temperature=0),
        "ours, no cache": lambda n: model.generate(prompt, n, temperature=0, use_cache=False),
        "PyTorch, no cache (nanoGPT loop)": lambda n: peer.generate(torch.from_numpy(prompt), n).numpy(),
    }
    if hf is not None:
        def hf_generate(n):
            with torch.no_grad():
                return hf.generate(torch.from_numpy(prompt), attention_mask=mask, do_sample=False, max_new_tokens=n,
                                   min_new_tokens=n, pad_token_id=0).numpy()
        generators["transformers generate, KV cache"] = hf_generate

    results = {}

    def timed_run(name):
        return lambda: results.__setitem__(name, generators[name](new_tokens))

    print(f"\n(b) greedy generation of {new_tokens} tokens after a {prompt_len}-token prompt; median of {repeats}")
    medians = interleaved({name: timed_run(name) for name in generators}, repeats,
                          warm_up={name: lambda g=g: g(4) for name, g in generators.items()})
    rate = {name: new_tokens / seconds for name, seconds in medians.items()}
    reference = results["ours, KV cache"]
    for name, tokens_per_s in rate.items():
        same = "same tokens as ours" if np.array_equal(results[name], reference) else "DIFFERENT tokens"
        print(f"    {name:<34}{tokens_per_s:9.1f} tokens/s   ({medians[name]:.2f} s; {same})")
    cached = rate["ours, KV cache"]
    uncached = rate["ours, no cache"]
    print(f"    ours, KV cache vs ours, no cache: {cached / uncached:.1f}× the tokens/s (target ≥ 3×)")
    torch_rate = rate["PyTorch, no cache (nanoGPT loop)"]
    print(f"    ours, KV cache vs PyTorch, no cache: {cached / torch_rate:.1f}× the tokens/s (target ≥ 1×)")
    if hf is not None:
        print(f"    ours, KV cache vs transformers, KV cache: {cached / rate['transformers generate, KV cache']:.2f}× "
              "the tokens/s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a 4-layer, 256-wide model, 64 tokens, 32 new tokens: a smoke run in seconds")
    parser.add_argument("--repeats", type=int, default=5, help="timed forward + backward runs per peer")
    parser.add_argument("--gen-repeats", type=int, default=1, help="timed generations per peer")
    parser.add_argument("--seq", type=int, help="tokens per forward + backward (default 128)")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, help="tokens to generate (default 256)")
    parser.add_argument("--skip-generation", action="store_true")
    parser.add_argument("--profile", action="store_true", help="cProfile our forward + backward")
    args = parser.parse_args()

    import torch

    threads = blas_threads()
    torch.set_num_threads(threads)
    config = GPTConfig(n_layer=4, n_head=4, n_embd=256) if args.quick else GPTConfig()
    seq = args.seq or (64 if args.quick else 128)
    new_tokens = args.new_tokens or (32 if args.quick else 256)
    print(f"GPT-2 architecture n_layer={config.n_layer}, n_head={config.n_head}, n_embd={config.n_embd}, "
          f"vocab {config.vocab_size}: {GPT.__module__} vs torch {torch.__version__}; float32, "
          f"{threads} thread(s) each (NumPy BLAS and torch.set_num_threads)")

    ag.manual_seed(0)
    start = time.perf_counter()
    model = GPT(config)
    print(f"built our model in {time.perf_counter() - start:.1f} s: {model.num_parameters():,} parameters")
    peer = torch_gpt(model)
    forward_backward(model, peer, 1, seq, args.repeats, args.profile)
    if not args.skip_generation:
        model.zero_grad()
        generation(model, peer, transformers_gpt(model), args.prompt, new_tokens, args.gen_repeats)


if __name__ == "__main__":
    main()
