"""One training step of the main job's default model, ours beside PyTorch: time and peak memory.

Run from the repository root, alone:  python -m benchmarks.train_step [--repeats N]

The step is what `python -m models.train` does per iteration: forward and
loss on a 12 × 64 batch, backward, gradient clipping, AdamW — for the
default GPT (4 layers, 4 heads, 128 wide, vocabulary 65), float32, the same
weights and batch on both sides, threads matched. Time: medians of
interleaved runs in one process. Memory: each peer in a fresh process of its
own (PyTorch's libraries alone weigh hundreds of MB), measured as the peak
resident memory of a step above the resident memory before it, with
glibc's mmap threshold fixed so freed arrays go back to the OS and the
resident size follows what is alive. Prints; asserts nothing.
"""
import argparse
import gc
import json
import os
import subprocess
import sys

import numpy as np

import autograd as ag
import nn
from benchmarks.gpt2 import blas_threads, interleaved, torch_gpt
from models.gpt2 import GPT, GPTConfig

CONFIG = GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128)
BATCH = 12
LR, BETAS, WEIGHT_DECAY, CLIP = 1e-3, (0.9, 0.99), 0.1, 1.0


def random_batch(config, batch, seq):
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, size=(batch, seq + 1))
    return np.ascontiguousarray(tokens[:, :-1]), np.ascontiguousarray(tokens[:, 1:])


def make_step(which, model, batch, device="cpu"):
    """One full training step (forward, backward, clipping, AdamW) of `model` ("ours") or of a
    PyTorch copy of it ("torch") on `device`, always on the same (x, y) batch of token ids."""
    x, y = batch
    if which == "ours":
        model.to(device)
        x, y = ag.Tensor(x, device=device), ag.Tensor(y, device=device)
        opt = nn.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)

        def ours():
            _, loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            nn.optim.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            return loss.item()
        return ours

    import torch
    peer = torch_gpt(model).to(device)
    tx, ty = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    torch_opt = torch.optim.AdamW(peer.parameters(), lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)

    def theirs():
        loss = peer(tx, ty)
        torch_opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(peer.parameters(), CLIP)
        torch_opt.step()
        return loss.item()
    return theirs


def new_model():
    ag.manual_seed(0)
    return GPT(CONFIG)


def resident_kb(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))


def measure_memory(which):
    """In this (fresh) process: MB of persistent state and of a step's peak above it, for one peer."""
    import torch
    torch.set_num_threads(blas_threads())
    before_model = resident_kb("VmRSS:")
    step = make_step(which, new_model(), random_batch(CONFIG, BATCH, CONFIG.block_size))  # PyTorch's keeps only its copy
    gc.collect()
    step()  # creates the optimizer's buffers
    step()
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak resident size (VmHWM) to the current one
    before_step = resident_kb("VmRSS:")
    step()
    peak = resident_kb("VmHWM:")
    return {"state_mb": (before_step - before_model) / 1024, "step_peak_mb": (peak - before_step) / 1024}


def memory_in_subprocess(which):
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    out = subprocess.run([sys.executable, "-m", "benchmarks.train_step", "--memory-of", which], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed steps per peer")
    parser.add_argument("--memory-of", choices=["ours", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_of:
        print(json.dumps(measure_memory(args.memory_of)))
        return

    import torch
    threads = blas_threads()
    torch.set_num_threads(threads)
    print(f"training step of the default GPT ({CONFIG.n_layer} layers, {CONFIG.n_head} heads, {CONFIG.n_embd} wide, "
          f"vocab {CONFIG.vocab_size}), batch {BATCH} × {CONFIG.block_size}, float32, {threads} thread(s) each")
    model = new_model()
    batch = random_batch(CONFIG, BATCH, CONFIG.block_size)
    ours, theirs = make_step("ours", model, batch), make_step("torch", model, batch)
    print(f"first-step loss: ours {ours():.6f}, PyTorch {theirs():.6f} (same weights, same batch)")
    medians = interleaved({"ours": ours, "PyTorch": theirs}, args.repeats)
    for name, seconds in medians.items():
        print(f"  {name:<8} {seconds * 1e3:8.1f} ms per step   {BATCH * CONFIG.block_size / seconds:9,.0f} tokens/s")
    print(f"time: ours / PyTorch = {medians['ours'] / medians['PyTorch']:.2f}x  (target <= 2x)")

    memory = {name: memory_in_subprocess(name) for name in ("ours", "torch")}
    for name, m in memory.items():
        print(f"  {name:<8} state (weights + AdamW) {m['state_mb']:6.1f} MB, step peak above it {m['step_peak_mb']:6.1f} MB")
    total = {name: m["state_mb"] + m["step_peak_mb"] for name, m in memory.items()}
    print(f"peak memory: ours / PyTorch = {total['ours'] / total['torch']:.2f}x of state + step peak, "
          f"{memory['ours']['step_peak_mb'] / memory['torch']['step_peak_mb']:.2f}x of the step peak alone "
          "(target <= 1.5x)")


if __name__ == "__main__":
    main()
