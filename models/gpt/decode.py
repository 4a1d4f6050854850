"""GPT-2's static-cache decode path: one token per step as a fixed list of kernel launches, a CUDA graph on a GPU.

What this file promises:

* `run(model, tokens, start, stop, ...)`, which `GPT.generate` calls: the
  prompt tokens[:, :start] goes through the ordinary forward (prefill) into a
  KV cache preallocated at block_size, then each step writes the next token
  into tokens[:, start:], as far as block_size + 1 tokens (the window the
  dynamic cache also sees whole); it returns where it stopped. Greedy tokens
  are the dynamic cache's; sampling draws from a Philox counter (position,
  row) under a key taken from autograd's generator of the model's device, so
  `autograd.manual_seed` makes it reproducible.
* A step (`StaticDecoder.step`) reads the last token and its position from
  device memory and touches only buffers allocated with the decoder, so on
  "cuda" it is captured once per (model, batch size, dtype) as a CUDA graph
  (after one step run launch by launch) and replayed per token: one launch
  from the host. `supports(model)` says which models it computes exactly
  (GPT.generate keeps the dynamic cache for the others). Tokens stay on the device
  until the caller copies them. Where capture fails, the same kernels run one
  by one, and a warning says once why.
* `mode(device)`: the environment variable GPT_DECODE chooses — "dynamic"
  (GPT.generate's own loop; the default on the CPU, where NumPy's matmuls make
  it faster), "static" (these kernels, launched one by one; on the CPU, their
  NumPy twins) or "graph" (the default on "cuda").
"""
import contextlib
import warnings
import weakref

import numpy as np

import nn
from autograd import backend, switches
from models.gpt import decode_kernels as kernels

_decoders = weakref.WeakKeyDictionary()  # model → {(batch size, dtype): StaticDecoder}


def mode(device):
    """How generate decodes on `device`: GPT_DECODE if set, else "graph" on "cuda" and "dynamic" on the CPU."""
    return switches.read("GPT_DECODE") or ("graph" if device == "cuda" else "dynamic")  # read() checks the value


def supports(model):
    """Whether the kernels compute this model as it is: plain Linears (no LoRA adapters), float32 or float64
    weights of one dtype in C order, and a head size and block size the attention kernel's block and shared
    memory hold."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    dtype = np.dtype(model.transformer.wte.weight.dtype)
    config = model.config
    # the module is compiled for wte's dtype and reads every weight through a pointer to it
    return (all(type(m) is nn.Linear for m in linears) and dtype in kernels.C_TYPES
            and all(p.data.dtype == dtype and p.data.flags.c_contiguous for p in model.parameters())
            and config.n_embd // config.n_head <= kernels.ATTENTION_THREADS
            and (config.block_size + kernels.ATTENTION_THREADS + kernels.ATTENTION_SCRATCH) * dtype.itemsize
            <= 48 * 1024)


def run(model, tokens, start, stop, temperature, top_k, top_p, make_cache):
    """Fill tokens[:, start:] (a device array) up to `stop` or block_size + 1; return the index after the last.

    `make_cache(batch_size)` makes the KVCache the ordinary forward fills (GPT's
    own class, preallocated at block_size); the decoder keeps it for its life.
    """
    B = tokens.shape[0]
    decoder = _decoder(model, B, make_cache)
    end = min(stop, model.config.block_size + 1)
    with decoder.on_stream():
        decoder.cache.reset()
        logits, _ = model(tokens[:, :start], kv_cache=decoder.cache, last_only=True)  # prefill: (B, 1, V)
        decoder.first_token(logits.data[:, -1], start, temperature, top_k, top_p)
        for _ in range(start + 1, end):
            decoder.step()
        tokens[:, start:end] = decoder.out[:, start:end]  # on the device: the host sees tokens when the caller asks
    return end


def _decoder(model, batch_size, make_cache):
    """The model's decoder for this batch size and dtype, made anew when its weights' arrays changed."""
    dtype = np.dtype(model.transformer.wte.weight.dtype)
    made = _decoders.setdefault(model, {})
    decoder = made.get((batch_size, dtype))
    if decoder is None or not decoder.current(model):
        decoder = made[(batch_size, dtype)] = StaticDecoder(model, batch_size, make_cache(batch_size))
    return decoder


class StaticDecoder:
    """Every buffer a decode step touches, allocated once; `step()` runs (or replays) the step's launches."""

    def __init__(self, model, batch_size, cache):
        config = model.config
        wte = model.transformer.wte.weight
        self.device, dtype = wte.device, wte.dtype
        xp = backend.xp_for(self.device)
        hs = config.n_embd // config.n_head
        if self.device == "cuda":
            self.kernels = kernels.CudaKernels(hs, config.layer_norm_epsilon, dtype)
        else:
            self.kernels = kernels.NumpyKernels(config.layer_norm_epsilon)
        self.arrays = [p.data for p in model.parameters()]  # the addresses the graph holds
        self.cache = cache
        B, C, V = batch_size, config.n_embd, config.vocab_size
        zeros = lambda *shape, dtype=dtype: xp.zeros(shape, dtype=dtype)  # noqa: E731
        self.token, self.pos = zeros(B, dtype=np.int32), zeros(1, dtype=np.int32)
        self.params = zeros(kernels.PARAMS, dtype=np.float64)
        self.out = zeros(B, config.block_size + 1, dtype=np.int32)  # token n is written at out[:, n]
        self.x, self.h, self.att = zeros(B, C), zeros(B, C), zeros(B, C)
        # logits cover the real vocabulary alone: lm_head scores wte's first V rows, never a padded vocabulary's rest
        self.qkv, self.fc, self.logits = zeros(B, 3 * C), zeros(B, 4 * C), zeros(B, V)
        no_bias = {width: zeros(width) for width in (C, 3 * C, 4 * C)}  # bias=False: the kernels add zeros

        def linear(m):
            return m.weight.data, m.bias.data if m.bias is not None else no_bias[m.weight.shape[1]]

        def norm(m):
            return m.weight.data, m.bias.data if m.bias is not None else no_bias[C]
        t = model.transformer
        self.wte, self.wpe, self.ln_f = t.wte.weight.data, t.wpe.weight.data, norm(t.ln_f)
        self.layers = [(norm(b.ln_1), linear(b.attn.c_attn), linear(b.attn.c_proj), norm(b.ln_2),
                        linear(b.mlp.c_fc), linear(b.mlp.c_proj), layer.keys, layer.values)
                       for b, layer in zip(t.h, cache.layers)]
        self.graph, self.stream = None, None
        self.capture = mode(self.device) == "graph"
        if self.capture and self.device != "cuda":
            self._eagerly("CUDA graphs need the 'cuda' device")

    def current(self, model):
        """Whether the model's parameters are still the arrays this decoder (and its graph) reads."""
        arrays = [p.data for p in model.parameters()]
        return len(arrays) == len(self.arrays) and all(a is b for a, b in zip(arrays, self.arrays))

    def on_stream(self):
        """On "cuda", a context on a non-default stream of the decoder's own (graphs are captured on one); else none."""
        return self._on_stream() if self.device == "cuda" else contextlib.nullcontext()

    @contextlib.contextmanager
    def _on_stream(self):
        cuda = backend.xp_for("cuda").cuda
        caller = cuda.get_current_stream()
        if self.stream is None:
            self.stream = cuda.Stream(non_blocking=True)  # which does not wait for the legacy default stream
        self.stream.wait_event(caller.record())  # so it waits here: for the prompt's copy, the weights' updates
        with self.stream:
            yield
        caller.wait_event(self.stream.record())  # and the caller's next work (the copy to the host) for ours

    def first_token(self, logits, start, temperature, top_k, top_p):
        """Sample token `start` from the prefill's last logits (B, V), and set the step's position to it."""
        xp = backend.xp_for(self.device)
        key = xp.floor(backend.generator(self.device).random(2) * 2.0 ** 32)  # this call's Philox key, on the device
        # a top_k of V or more keeps every token, as 0 does: clamped, it fits the kernel's int (a C cast of a
        # double beyond INT_MAX is undefined)
        self.params[:3] = xp.asarray([temperature, min(top_k or 0, logits.shape[-1]), 1.0 if top_p is None else top_p])
        self.params[3:] = key
        self.pos[...] = start - 1
        self.logits[...] = logits
        self.kernels.sample(self.logits, self.params, self.pos, self.token, self.out)
        self.kernels.advance(self.pos)

    def step(self):
        """Token pos + 1 from token pos: one graph launch once captured, else the launches one by one.

        The first step runs one by one, then is captured for the next ones: a kernel's first launch
        loads it onto the device (CUDA loads modules lazily), which must not happen inside a capture.
        """
        if self.graph is not None:
            self.graph.launch(self.stream)
            return
        self._launches()
        if self.capture:
            self._capture()

    def _launches(self):
        k = self.kernels
        k.embed(self.token, self.pos, self.wte, self.wpe, self.x)
        for ln_1, c_attn, attn_proj, ln_2, c_fc, mlp_proj, keys, values in self.layers:
            k.layer_norm(self.x, *ln_1, self.h)
            k.matvec(self.h, *c_attn, self.qkv, kernels.PLAIN)
            k.attention(self.qkv, keys, values, self.pos, self.att)
            k.matvec(self.att, *attn_proj, self.x, kernels.RESIDUAL)
            k.layer_norm(self.x, *ln_2, self.h)
            k.matvec(self.h, *c_fc, self.fc, kernels.GELU)
            k.matvec(self.fc, *mlp_proj, self.x, kernels.RESIDUAL)
        k.layer_norm(self.x, *self.ln_f, self.h)
        k.lm_head(self.h, self.wte, self.logits)
        k.sample(self.logits, self.params, self.pos, self.token, self.out)
        k.advance(self.pos)

    def _capture(self):
        stream = self.stream
        try:
            stream.begin_capture()
        except Exception as exc:  # an old CuPy without stream capture, or a driver that refuses it
            return self._eagerly(f"stream capture is unavailable ({type(exc).__name__}: {exc})")
        try:
            self._launches()
        except Exception as exc:
            with contextlib.suppress(Exception):  # leave capture mode; the partial graph is dropped
                stream.end_capture()
            return self._eagerly(f"a launch failed during capture ({type(exc).__name__}: {exc})")
        self.graph = stream.end_capture()

    def _eagerly(self, why):
        self.capture = False
        warnings.warn(f"decode: {why}; running the decode kernels one by one", RuntimeWarning, stacklevel=3)
