"""Everything that runs on the CPU gives the same numbers on `--device cuda` (float32 tolerance).

Each test computes on the device under test and on the CPU from the same
inputs and compares: ops forward and backward (scatter-add through CuPy's own
primitive included), the seed models, GPT-2 logits within 1e-4, optimizers,
checkpoints moved between devices, generation, and the CLIs.
"""
import json
import shutil
import sys

import numpy as np
import pytest

import autograd as ag
import nn
from autograd import Tensor, backend

RNG = np.random.default_rng(0)


def both(fn, arrays, device, requires_grad=True):
    """fn's output and every input's gradient, computed on the CPU and on `device` (as host arrays)."""
    results = []
    for where in ("cpu", device):
        inputs = [Tensor(a, requires_grad=requires_grad and a.dtype.kind == "f", device=where) for a in arrays]
        out = fn(*inputs)
        assert out.device == where and all(t.device == where for t in inputs)
        if requires_grad:
            out.backward(Tensor(np.linspace(-1, 1, out.size).reshape(out.shape).astype(out.dtype), device=where))
        grads = [backend.to_host(t.grad) if t.grad is not None else None for t in inputs]
        assert all(t.grad is None or backend.device_of(t.grad) == where for t in inputs)
        results.append((out.numpy(), grads))
    return results


def assert_same(results, rtol=1e-5, atol=1e-5):
    (cpu_out, cpu_grads), (dev_out, dev_grads) = results
    np.testing.assert_allclose(dev_out, cpu_out, rtol=rtol, atol=atol)
    for c, d in zip(cpu_grads, dev_grads):
        if c is not None:
            np.testing.assert_allclose(d, c, rtol=rtol, atol=atol)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


OPS = {
    "add-broadcast": (lambda a, b: a + b, [f32(3, 4), f32(4)]),
    "mul-div-pow": (lambda a, b: (a * b) / (b * b + 1) ** 1.5, [f32(3, 4), f32(3, 1)]),
    "matmul-batched": (lambda a, b: a @ b, [f32(2, 3, 4), f32(4, 5)]),
    "linear": (lambda x, w, b: ag.linear(x, w, b), [f32(2, 3, 4), f32(4, 5), f32(5)]),
    "reductions": (lambda a: a.sum(0) + a.mean(1).sum() + a.max(1).sum() + a.var(0), [f32(4, 3)]),
    "unary": (lambda a: a.exp().tanh() + a.sigmoid() + a.relu() + a.gelu() + (a * a + 1).log().sqrt(), [f32(5, 6)]),
    "shapes": (lambda a: a.reshape(6, 2).T.transpose(1, 0)[1:, ::2][[0, 0, 3]], [f32(3, 4)]),
    "softmax-masked": (lambda a: ag.softmax(a, mask=np.tril(np.ones((4, 4), bool))), [f32(2, 4, 4)]),
    "log_softmax": (lambda a: a.log_softmax(), [f32(3, 7)]),
    "cross_entropy": (lambda z: ag.cross_entropy(z, np.array([[1, 4, -1], [0, 0, 2]]), ignore_index=-1),
                      [f32(2, 3, 5)]),
    "embedding-scatter-add": (lambda w: ag.embedding(w, np.array([[1, 1, 3], [3, 0, 1]])), [f32(5, 4)]),
    "layer_norm": (lambda x, w, b: ag.layer_norm(x, w, b), [f32(2, 3, 8), f32(8), f32(8)]),
    "attention": (lambda q, k, v: ag.scaled_dot_product_attention(q, k, v), [f32(2, 2, 5, 4)] * 3),
    "join-split": (lambda a, b: ag.concat([ag.stack([a, b]).sum(0), *ag.split(b, 2, axis=1)], axis=1),
                   [f32(3, 4), f32(3, 4)]),
    "where": (lambda a, b: ag.where(np.array([True, False, True]), a, b), [f32(2, 3), f32(3)]),
    "pow-at-zero": (lambda a, b: a ** b + a ** 0 + 0.0 ** b, [np.array([0.0, 0.0, 2.0, 0.0], np.float32),
                                                            np.array([0.0, 2.0, 0.0, 0.5], np.float32)]),
    "pytorch-spellings": (lambda a: a.mean(dim=0, keepdim=True) + a.view(4, 3).max(dim=1).values.sum()
                          + a.softmax(dim=0), [f32(3, 4)]),
}


@pytest.mark.parametrize("name", list(OPS))
def test_op_forward_and_backward_match_the_cpu(device, name):
    fn, arrays = OPS[name]
    assert_same(both(fn, arrays, device))


def test_float16_picks_repeated_4096_times_add_up_in_float32(device):
    """CuPy's scatter_add adds float16 with float16 atomics, where 2048 + 1 rounds back to 2048: an embedding row
    picked 4096 times got 2048 from a gradient of ones. backend.scatter_add adds in float32: exactly 4096."""
    ids = np.zeros(4096, np.int64)
    for pick in (lambda w: w[ids], lambda w: ag.embedding(w, ids)):
        w = Tensor(np.ones((3, 8), np.float16), requires_grad=True, device=device)
        pick(w).sum().backward()
        np.testing.assert_array_equal(backend.to_host(w.grad), np.outer([4096, 0, 0], np.ones(8)))


def test_python_and_numpy_read_a_device_tensor_through_the_host(device):
    t = Tensor(f32(3, 4), device=device, requires_grad=True)
    a = np.asarray(t)
    assert type(a) is np.ndarray and a.dtype == np.float32
    np.testing.assert_array_equal(a, t.numpy())
    assert np.mean(t) == pytest.approx(float(t.numpy().mean()), rel=1e-6)
    assert isinstance(np.concatenate([t, t]), np.ndarray)
    with pytest.raises(ValueError, match="only as a copy"):
        t.__array__(copy=False)
    assert bool(Tensor([1.0], device=device) > 0) and float(Tensor([2.5], device=device)) == 2.5
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(t)
    with pytest.raises(ValueError, match="cannot be stored as uint8"):
        Tensor(Tensor([3, 300], device=device), dtype="uint8")
    assert (Tensor([1.0, 2.0], device=device) + [1, 2]).dtype == np.float32


def test_dropout_on_the_device_is_seeded_and_inverted(device):
    x = Tensor(np.ones((200, 100), dtype=np.float32), device=device)
    ag.manual_seed(5)
    first = ag.dropout(x, 0.25).numpy()
    ag.manual_seed(5)
    assert np.array_equal(ag.dropout(x, 0.25).numpy(), first)
    assert set(np.unique(first)) <= {0.0, np.float32(1 / 0.75)}
    assert abs((first == 0).mean() - 0.25) < 0.02


def test_tiny_model_numbers_on_the_device(device):
    from models.lessons import tiny
    model = tiny.TinyTransformer().to(device)
    logits = model(np.array(tiny.INPUT_IDS))
    loss = tiny.last_position_loss(logits, tiny.TARGET_ID)
    loss.backward()
    assert loss.device == device
    assert abs(loss.item() - 2.467373) < 1e-5
    np.testing.assert_allclose(backend.to_host(model.E.grad)[4], [-0.915189, 0.915189], atol=1e-5)


def small_gpt(device):
    from models.gpt.gpt2 import GPT, GPTConfig
    ag.manual_seed(0)
    return GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32)).to(device)


def test_gpt_logits_loss_and_grads_match_the_cpu(device):
    tokens = RNG.integers(0, 64, size=(2, 17))
    results = []
    for where in ("cpu", device):
        model = small_gpt(where)
        logits, loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        results.append((logits.numpy(), loss.item(), {n: backend.to_host(p.grad) for n, p in model.named_parameters()}))
    (cpu_logits, cpu_loss, cpu_grads), (dev_logits, dev_loss, dev_grads) = results
    np.testing.assert_allclose(dev_logits, cpu_logits, atol=1e-4)
    assert abs(dev_loss - cpu_loss) < 1e-5
    for name in cpu_grads:
        np.testing.assert_allclose(dev_grads[name], cpu_grads[name], atol=1e-5, err_msg=name)


def test_adamw_steps_match_the_cpu(device):
    tokens = RNG.integers(0, 64, size=(2, 17))
    losses = {}
    for where in ("cpu", device):
        model = small_gpt(where)
        opt = nn.optim.AdamW(model.parameters(), lr=1e-2)
        losses[where] = []
        for _ in range(3):
            _, loss = model(tokens[:, :-1], tokens[:, 1:])
            opt.zero_grad()
            loss.backward()
            nn.optim.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses[where].append(loss.item())
    np.testing.assert_allclose(losses[device], losses["cpu"], atol=1e-5)


def test_checkpoints_move_between_devices(device, tmp_path):
    from models.gpt.gpt2 import GPT
    model = small_gpt(device)
    model.save_pretrained(tmp_path / "from_device")
    on_cpu = GPT.from_pretrained(tmp_path / "from_device")
    for (name, p), q in zip(model.named_parameters(), on_cpu.parameters()):
        np.testing.assert_array_equal(backend.to_host(p.data), q.data, err_msg=name)
    back = GPT.from_pretrained(tmp_path / "from_device").to(device)
    assert all(p.device == device for p in back.parameters())


def test_generation_with_cache_matches_the_cpu(device):
    prompt = [[1, 2, 3, 4]]
    cpu = small_gpt("cpu").generate(prompt, 20, temperature=0)
    model = small_gpt(device)
    assert model.generate(prompt, 20, temperature=0) == cpu
    assert model.generate(prompt, 20, temperature=0, use_cache=False) == cpu


def test_train_and_sample_clis_on_the_device(device, tmp_path, capsys):
    from models.training import sample, train
    out = tmp_path / "out"
    argv = ["--device", device, "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
            "--batch-size", "4", "--max-iters", "4", "--eval-interval", "2", "--eval-iters", "1",
            "--no-progress", "--sample-tokens", "10", "--out-dir", str(out)]
    assert train.main(argv) == 0
    assert json.loads((out / "train_state.json").read_text())["iter"] == 4
    assert sample.main([str(out), "--device", device, "--max-new-tokens", "5", "--prompt", "A"]) == 0
    assert capsys.readouterr().out.rstrip("\n").split("\n")[-1].startswith("A")


def test_a_resumed_run_with_dropout_repeats_itself_on_the_device(device, tmp_path, capsys):
    """CuPy's generators cannot be saved: a resume seeds the device's from (seed, iteration, rank), where it drew
    from the OS's entropy, so two resumes of one checkpoint give the same weights."""
    from models.training import train
    argv = ["--device", device, "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
            "--batch-size", "4", "--eval-interval", "2", "--eval-iters", "1", "--dropout", "0.2", "--no-progress",
            "--sample-tokens", "0"]
    assert train.main([*argv, "--max-iters", "2", "--out-dir", str(tmp_path / "a")]) == 0
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    for run in ("a", "b"):
        assert train.main([*argv, "--max-iters", "4", "--out-dir", str(tmp_path / run), "--resume"]) == 0
    capsys.readouterr()
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()


@pytest.fixture
def without_cupy(monkeypatch):
    """This process as on a machine without CuPy, whether or not this one has it."""
    monkeypatch.setattr(backend, "_cupy", None)
    monkeypatch.setitem(sys.modules, "cupy", None)


@pytest.mark.parametrize("name", ["gpt2", "generate"])
def test_benchmarks_on_cuda_without_cupy_stop_at_parse_time_before_any_peer(without_cupy, monkeypatch, capsys, name):
    """They started their peers, which built the model (GPT-2 small: 10 s) and ended in CuPy's traceback, exit 1.
    Only PyTorch's peers need no CuPy: they still start."""
    import importlib
    from benchmarks import alone
    bench = importlib.import_module(f"benchmarks.{name}")

    def started(module, args, argv=None):
        raise LookupError(f"{module} started its peers {args.peers}")
    monkeypatch.setattr(alone, "run", started)
    with pytest.raises(SystemExit) as stopped:
        bench.main(["--device", "cuda"])
    assert stopped.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"python -m benchmarks.{name}: error: argument --device: device 'cuda' needs CuPy")
    assert 'pip install -e ".[gpu]"' in captured.err
    with pytest.raises(LookupError, match="started its peers torch$"):
        bench.main(["--device", "cuda", "--peers", "torch"])


def test_a_benchmark_peer_does_not_check_cupy_again(without_cupy):
    """The harness checked before starting it; PyTorch's peer must not load CuPy, whose memory would count as its."""
    from benchmarks import alone
    parser = alone.parser("python -m benchmarks.x", "x", ["ours", "torch"])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    assert alone.parse_args(parser, ["--device", "cuda", "--peer", "torch"]).device == "cuda"
