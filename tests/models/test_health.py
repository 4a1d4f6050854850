"""The health report: its figures equal a direct computation on a small GPT, its files, its warnings, its CLI."""
import json
import math

import numpy as np
import pytest

import autograd as ag
import nn
from models.training import health, train
from models.gpt.gpt2 import GPT, GPTConfig

from .test_train import TINY


@pytest.fixture
def model():
    ag.manual_seed(0)
    return GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8))


def batch():
    rng = np.random.default_rng(1)
    return rng.integers(0, 11, size=(3, 8)), rng.integers(0, 11, size=(3, 8))


def direct_activations(model, idx):
    """Each block's figures by calling its parts one by one, the attention probabilities position by position."""
    T = idx.shape[1]
    tr = model.transformer
    x = tr.wte(ag.Tensor(idx)) + tr.wpe(ag.arange(0, T))
    out = {}
    for i, block in enumerate(tr.h):
        h = block.ln_1(x)
        B, _, C = h.shape
        nh = block.attn.n_head
        qkv = block.attn.c_attn(h).numpy().reshape(B, T, 3, nh, C // nh)
        q, k = qkv[:, :, 0], qkv[:, :, 1]  # (B, T, nh, hs)
        entropy = np.zeros(nh)
        for b in range(B):
            for head in range(nh):
                for t in range(T):
                    s = k[b, :t + 1, head].astype(np.float64) @ q[b, t, head] / math.sqrt(C // nh)
                    p = np.exp(s - s.max())
                    p /= p.sum()
                    entropy[head] -= (p * np.log(p)).sum() / (B * T)
        x = x + block.attn(h)
        pre = block.mlp.c_fc(block.ln_2(x)).numpy()
        x = x + block.mlp(block.ln_2(x))
        y = x.numpy().astype(np.float64)
        out[f"transformer.h.{i}"] = {"mean": y.mean(), "std": y.std(), "gelu_below_-3": (pre < -3).mean(),
                                     "attention_entropy": entropy}
    return out


def test_figures_equal_a_direct_computation(model, tmp_path):
    for p in model.parameters():  # wider weights, so some GELU inputs fall below -3
        p.data *= 6
    x, y = batch()
    monitor = health.Health(model, 1, tmp_path, max_norm=0.5)
    _, loss = model(ag.Tensor(x), ag.Tensor(y))
    loss.backward()
    monitor.after_backward(0, x)
    before = {n: p.data.astype(np.float64) for n, p in model.named_parameters()}
    grads = {n: p.grad.astype(np.float64) for n, p in model.named_parameters()}
    optimizer = nn.optim.AdamW(model.parameters(), lr=1e-2)
    nn.optim.clip_grad_norm_(model.parameters(), 0.5)
    optimizer.step()
    monitor.after_step(0)
    (record,) = monitor.records
    total = math.sqrt(sum((g ** 2).sum() for g in grads.values()))
    assert record["iter"] == 0 and record["grad_norm"] == pytest.approx(total, rel=1e-6)
    assert record["clipped"] is (total > 0.5) is True
    for name, p in model.named_parameters():
        figures = record["params"][name]
        assert figures["grad_norm"] == pytest.approx(np.linalg.norm(grads[name]), rel=1e-6)
        assert figures["weight_norm"] == pytest.approx(np.linalg.norm(before[name]), rel=1e-6)
        if not before[name].any():  # a bias at its initial 0 has no ratio
            assert figures["log10_update_ratio"] is None
            continue
        assert figures["log10_update_ratio"] == pytest.approx(
            math.log10(np.linalg.norm(p.data - before[name]) / np.linalg.norm(before[name])), abs=1e-6)
    # the activations are those of the weights the gradients were taken at
    for p, name in zip(model.parameters(), before):
        p.data = before[name].astype(np.float32)
    expected = direct_activations(model, x)
    assert set(record["blocks"]) == set(expected) == {"transformer.h.0", "transformer.h.1"}
    for block, figures in expected.items():
        got = record["blocks"][block]
        assert got["mean"] == pytest.approx(figures["mean"], rel=1e-5, abs=1e-7)
        assert got["std"] == pytest.approx(figures["std"], rel=1e-5)
        assert got["gelu_below_-3"] == figures["gelu_below_-3"]
        np.testing.assert_allclose(got["attention_entropy"], figures["attention_entropy"], rtol=1e-5)
    assert 0 < sum(b["gelu_below_-3"] for b in record["blocks"].values())  # the test looked at a real fraction
    assert json.loads((tmp_path / "health.jsonl").read_text()) == json.loads(json.dumps(record))


def test_only_due_iterations_are_recorded_and_the_picture_is_written(model, tmp_path):
    x, y = batch()
    lines = []
    monitor = health.Health(model, 2, tmp_path, say=lines.append)
    optimizer = nn.optim.AdamW(model.parameters(), lr=1e-3)
    for it in range(5):
        optimizer.zero_grad()
        model(ag.Tensor(x), ag.Tensor(y))[1].backward()
        monitor.after_backward(it, x)
        optimizer.step()
        monitor.after_step(it)
    monitor.close()
    rows = [json.loads(line) for line in (tmp_path / "health.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in rows] == [0, 2, 4]
    assert (tmp_path / "health.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert lines == [f"wrote the health report to {tmp_path / 'health.jsonl'} and {tmp_path / 'health.png'}"]


def test_interval_zero_does_nothing(model, tmp_path):
    monitor = health.Health(model, 0, tmp_path)
    monitor.after_backward(0, batch()[0])
    monitor.after_step(0)
    monitor.close()
    assert list(tmp_path.iterdir()) == [] and monitor.records == []


def fake_record(it, ratio, gelu, entropy):
    param = {"grad_norm": 1.0, "weight_norm": 1.0, "log10_update_ratio": ratio}
    return {"iter": it, "params": {"transformer.h.2.mlp.c_fc.weight": param,
                                   "transformer.h.2.mlp.c_fc.bias": dict(param, log10_update_ratio=0.0)},
            "blocks": {"transformer.h.2": {"gelu_below_-3": gelu, "attention_entropy": [2.0, entropy]}}}


def test_a_rule_warns_once_it_held_for_the_window_naming_the_layer_and_the_cause(model, tmp_path):
    monitor = health.Health(model, 25, tmp_path)
    monitor.matrices = {"transformer.h.2.mlp.c_fc.weight"}
    assert monitor.window_records == 3  # iterations 0, 25, 50: the rule held for 50 iterations
    monitor.records = [fake_record(0, -1.3, 0.2, 0.05), fake_record(25, -0.9, 0.2, 0.05)]
    assert monitor.warnings() == []  # not yet held for the window
    monitor.records.append(fake_record(50, -0.9, 0.2, 0.05))
    assert monitor.warnings() == [
        "health: h.2: 20% of GELU inputs below -3 for 50 iterations: the initialisation is likely too large: "
        "the pre-activations are too wide",
        "health: h.2: lowest head attention entropy 0.050 nats for 50 iterations: the initialisation (or the "
        "learning rate) is likely too large: the scores q·k are too wide"]
    monitor.records.append(fake_record(75, -0.8, 0.0, 2.0))
    assert monitor.warnings() == [
        "health: h.2.mlp.c_fc: update/weight 10^-0.8 for 50 iterations: the learning rate is likely too high"]
    monitor.records.append(fake_record(100, -0.8, 0.2, 0.05))
    assert monitor.warnings() == []  # each layer and rule once; the bias is never judged


def test_gelu_saturation_later_in_the_run_gets_a_warning_of_its_own(model, tmp_path):
    monitor = health.Health(model, 25, tmp_path)
    monitor.records = [fake_record(it, -2, 0.0 if it < 75 else 0.2, 2.0) for it in range(0, 125, 25)]
    assert monitor.warnings() == []  # 75, 100: not yet held for the window
    monitor.records.append(fake_record(125, -2, 0.2, 2.0))
    assert monitor.warnings() == [
        "health: h.2: 20% of GELU inputs below -3 for 50 iterations: units sit where GELU is flat and barely "
        "learn: the learning rate may be too high, or the MLP has more units than the task uses"]


def test_train_cli_writes_the_report_at_the_interval(tmp_path, capsys):
    code = train.main([*TINY, "--max-iters", "10", "--out-dir", str(tmp_path), "--health-interval", "4"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = [json.loads(line) for line in (tmp_path / "health.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in rows] == [0, 4, 8]
    assert set(rows[0]["blocks"]) == {"transformer.h.0"} and len(rows[0]["blocks"]["transformer.h.0"]
                                                                   ["attention_entropy"]) == 2
    assert (tmp_path / "health.png").is_file()
    assert f"wrote the health report to {tmp_path / 'health.jsonl'} and {tmp_path / 'health.png'}\n" in out
    # a folder of its own: the default out/ may hold the main job's checkpoint (the README runs it before the tests)
    fresh = ["--out-dir", str(tmp_path.with_name(tmp_path.name + "-fresh"))]  # not inside the checkpoint above
    assert train.parse_args(["--health-interval", *fresh]).health_interval == 50  # the option alone: every 50
    assert train.parse_args(fresh).health_interval == 0


def test_train_cli_without_the_options_writes_no_report_and_the_same_numbers(tmp_path, capsys):
    assert train.main([*TINY, "--max-iters", "6", "--out-dir", str(tmp_path / "plain")]) == 0
    assert train.main([*TINY, "--max-iters", "6", "--out-dir", str(tmp_path / "both"), "--health-interval", "2",
                       "--detect-anomaly"]) == 0
    capsys.readouterr()
    assert not (tmp_path / "plain" / "health.jsonl").exists()
    state = [json.loads((tmp_path / d / "train_state.json").read_text()) for d in ("plain", "both")]
    assert state[0]["history"] == state[1]["history"]  # watching changes no number
    weights = [(tmp_path / d / "model.safetensors").read_bytes() for d in ("plain", "both")]
    assert weights[0] == weights[1]
