"""GPU: our engine on CuPy beside PyTorch CUDA eager, on the same GPU in the same process.

Run on a machine with a GPU, CuPy and PyTorch for CUDA, from the repository root:
    python -m benchmarks.gpu [--steps N] [--batch B] [--seq T]

(1) The training step of the GPT-2 small architecture at batch 8 × 1024 tokens,
    float32 with TF32 matrix products allowed on both sides, AdamW and gradient
    clipping: tokens/s and model-FLOPs utilisation for each, and the ratio
    (target: ours at least 50 % of PyTorch's throughput).
(2) Generation with the KV cache: 256 new tokens after a 16-token prompt,
    tokens/s, ours beside transformers' generate (also with its cache).
(3) Each fused CUDA kernel against the composed version of its op
    (AUTOGRAD_FUSED=0), forward + backward: a kernel stays only if it wins.
Prints; asserts nothing. Medians of interleaved runs, each run ending by reading a
value back (which waits for the GPU).
"""
import os

os.environ.setdefault("CUPY_TF32", "1")  # before CuPy loads: TF32 matmuls, as PyTorch is allowed below

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import autograd as ag  # noqa: E402
from autograd import backend  # noqa: E402
from benchmarks.gpt2 import interleaved, transformers_gpt  # noqa: E402
from benchmarks.train_step import make_step, random_batch  # noqa: E402
from models.gpt2 import GPT, GPTConfig  # noqa: E402

def peak_flops():
    """TF32 matmul FLOP/s of this GPU through CuPy: the yardstick for model-FLOPs utilisation."""
    cp = backend.xp_for("cuda")
    a = cp.ones((8192, 8192), dtype=cp.float32)
    (a @ a)[0, 0].item()
    start = time.perf_counter()
    for _ in range(5):
        c = a @ a
    c[0, 0].item()
    return 5 * 2 * 8192 ** 3 / (time.perf_counter() - start)


def training(model, batch, seq, steps, peak):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    tokens = random_batch(model.config, batch, seq)
    theirs = make_step("torch", model, tokens, device="cuda")  # copies the weights before ours move
    ours = make_step("ours", model, tokens, device="cuda")
    print(f"(1) training step, GPT-2 small, batch {batch} × {seq}, float32 + TF32, AdamW; median of {steps}")
    print(f"    first-step loss: ours {ours():.5f}, PyTorch {theirs():.5f}")
    medians = interleaved({"ours": ours, "PyTorch": theirs}, steps)
    n = model.num_parameters()
    flops_per_token = 6 * n + 12 * model.config.n_layer * model.config.n_embd * seq
    rate = {}
    for name, seconds in medians.items():
        rate[name] = batch * seq / seconds
        print(f"    {name:<8} {seconds * 1e3:8.1f} ms/step {rate[name]:10,.0f} tokens/s   "
              f"MFU {rate[name] * flops_per_token / peak:6.1%}")
    print(f"    ours / PyTorch throughput: {rate['ours'] / rate['PyTorch']:.1%}  (target >= 50%)")
    del theirs
    torch.cuda.empty_cache()


def generation(model, new_tokens):
    import torch
    prompt = np.random.default_rng(1).integers(0, model.config.vocab_size, size=(1, 16))
    hf = transformers_gpt(model.to("cpu"))
    model.to("cuda")
    runs = {"ours, KV cache": lambda: model.generate(prompt, new_tokens, temperature=0)}
    if hf is not None:
        hf = hf.cuda()
        tp = torch.from_numpy(prompt).cuda()

        def hf_generate():
            with torch.no_grad():
                return hf.generate(tp, attention_mask=torch.ones_like(tp), do_sample=False, max_new_tokens=new_tokens,
                                   min_new_tokens=new_tokens, pad_token_id=0).cpu().numpy()
        runs["transformers, KV cache"] = hf_generate
    medians = interleaved(runs, 3)
    print(f"(2) greedy generation, {new_tokens} tokens after 16, GPT-2 small on the GPU")
    for name, seconds in medians.items():
        print(f"    {name:<24} {new_tokens / seconds:8.1f} tokens/s")


def kernels():
    cp = backend.xp_for("cuda")
    x = ag.Tensor(cp.random.standard_normal((8 * 1024, 3072), dtype=cp.float32), requires_grad=True)
    g = cp.ones(x.shape, dtype=cp.float32)

    def gelu(fused):
        def run():
            os.environ["AUTOGRAD_FUSED"] = fused
            x.grad = None
            x.gelu().backward(g)
            return x.grad[0, 0].item()
        return run
    medians = interleaved({"fused": gelu("1"), "composed": gelu("0")}, 20)
    os.environ["AUTOGRAD_FUSED"] = "1"
    print("(3) GELU forward + backward on (8192, 3072) float32")
    for name, seconds in medians.items():
        print(f"    {name:<9} {seconds * 1e3:7.2f} ms")
    print(f"    fused kernel speed-up: {medians['composed'] / medians['fused']:.2f}x (keep it only if > 1)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per peer")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--peak-tflops", type=float, default=None, help="default: measured TF32 matmul rate")
    args = parser.parse_args()
    backend.xp_for("cuda")  # a clear error without CuPy or a GPU
    peak = args.peak_tflops * 1e12 if args.peak_tflops else peak_flops()
    print(f"GPU peak for MFU: {peak / 1e12:.0f} TFLOP/s (TF32 matmul)")
    ag.manual_seed(0)
    model = GPT(GPTConfig())
    training(model, args.batch, args.seq, args.steps, peak)
    generation(model, args.new_tokens)
    kernels()


if __name__ == "__main__":
    main()
