"""The health report: its figures equal a direct computation on a small GPT, its files, its warnings, its CLI."""
import json
import math
import re

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


def test_attention_entropy_is_the_log_of_the_keys_each_query_spreads_over_evenly():
    q = np.zeros((1, 1, 4, 2))  # every score 0: query t spreads evenly over its t + 1 keys
    assert health.attention_entropy(q, q) == pytest.approx([np.mean(np.log([1, 2, 3, 4]))], rel=1e-12)
    # scores ±10⁴/√1: query 0 sees one key, query 1 only itself, query 2 keys 0 and 2 alike: (0 + 0 + log 2) / 3
    q = np.array([[[[100.0], [-100.0], [100.0]]]])
    assert health.attention_entropy(q, q) == pytest.approx([math.log(2) / 3], rel=1e-12)


@pytest.mark.parametrize("name, figure, quiet, warns", [
    ("update too large", "log10_update_ratio", -1.0, np.nextafter(-1.0, 0)),
    ("update too small", "log10_update_ratio", -5.0, np.nextafter(-5.0, -6)),
    ("GELU saturated", "gelu_below_-3", 5 / 100, 6 / 100),
    ("attention collapsed", "attention_entropy", 0.1, np.nextafter(0.1, 0))])
def test_each_rule_holds_just_beyond_its_documented_limit_and_not_at_it(name, figure, quiet, warns):
    (rule,) = [r for r in health.RULES if r.name == name]

    def figures(x):
        return {figure: [2.0, x] if figure == "attention_entropy" else x, "update_norm": 1.0}
    assert (rule.holds(figures(quiet)), rule.holds(figures(warns))) == (False, True)


def test_a_nan_gradient_is_null_and_clipped_as_clip_grad_norm_scales_it(model, tmp_path):
    """The record said clipped: false where clip_grad_norm_ had scaled every gradient to NaN."""
    x, y = batch()
    monitor = health.Health(model, 1, tmp_path, max_norm=1.0)
    model(ag.Tensor(x), ag.Tensor(y))[1].backward()
    named = dict(model.named_parameters())
    named["transformer.h.0.mlp.c_fc.weight"].grad[0, 0] = np.nan
    monitor.after_backward(0, x)
    nn.optim.clip_grad_norm_(model.parameters(), 1.0)
    assert np.isnan(named["transformer.wte.weight"].grad).all()  # clipping scaled it
    monitor.after_step(0)
    record = json.loads((tmp_path / "health.jsonl").read_text())
    assert (record["grad_norm"], record["clipped"]) == (None, True)
    assert record["params"]["transformer.h.0.mlp.c_fc.weight"]["grad_norm"] is None


def test_nan_figures_are_null_in_strict_json_and_a_nan_attention_is_no_collapse(model, tmp_path):
    """A NaN weight was written as NaN (not JSON), and its block's attention as an entropy of 0 nats."""
    x, y = batch()
    lines = []
    monitor = health.Health(model, 1, tmp_path, say=lines.append, window=1)
    dict(model.named_parameters())["transformer.h.0.mlp.c_fc.weight"].data[0, 0] = np.nan  # NaN from h.0's MLP on
    train_steps(model, monitor, nn.optim.SGD(model.parameters(), lr=0.0), range(2))
    for line in (tmp_path / "health.jsonl").read_text().splitlines():
        record = json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in {line}"))
        assert record["params"]["transformer.h.0.mlp.c_fc.weight"]["weight_norm"] is None
        assert record["blocks"]["transformer.h.0"]["std"] is None
        assert record["blocks"]["transformer.h.1"]["attention_entropy"] == [None, None]
    first = monitor.records[0]["blocks"]["transformer.h.0"]["attention_entropy"]  # its attention is before the NaN
    assert all(0 < e < math.log(8) for e in first)
    assert not [line for line in lines if "attention" in line]
    monitor.close()  # the picture draws the nulls as gaps
    assert (tmp_path / "health.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_lora_runs_picture_draws_the_adapters_the_rules_judge(model, tmp_path, monkeypatch):
    """The weight panels drew names ending in "weight": none of a LoRA run's, so they were empty."""
    import matplotlib.pyplot as plt
    nn.lora(model, 2, 4, ["c_attn"])
    monitor = health.Health(model, 1, tmp_path, say=lambda line: None)
    train_steps(model, monitor, nn.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-2), range(2))
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    monitor.close()
    adapters = [f"h.{i}.attn.c_attn.lora_{ab}" for i in range(2) for ab in "AB"]
    ratio, gradient = figures[0].axes[:2]
    assert [line.get_label() for line in ratio.get_lines()][:4] == adapters
    for line, name in zip(gradient.get_lines(), [f"transformer.{a}" for a in adapters]):
        norms = [r["params"][name]["grad_norm"] for r in monitor.records]
        assert [y for y, x in zip(line.get_ydata(), norms) if x] == [x for x in norms if x]  # a 0 sits below


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


@pytest.mark.parametrize("clip", [0.0, 1e-9])
def test_the_norm_panels_legend_names_clipping_only_where_it_scaled_a_step(model, tmp_path, monkeypatch, clip):
    """A run without clipping had "clipping scaled it" in its legend, with no marker drawn."""
    import matplotlib.pyplot as plt
    x, y = batch()
    monitor = health.Health(model, 1, tmp_path, max_norm=clip, say=lambda line: None)
    for it in range(2):
        model.zero_grad()
        model(ag.Tensor(x), ag.Tensor(y))[1].backward()
        monitor.after_backward(it, x)
        monitor.after_step(it)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    monitor.close()
    legend = [t.get_text() for t in figures[0].axes[2].get_legend().get_texts()]
    assert legend == (["global gradient norm", "clipping scaled it", "clipping norm"] if clip
                      else ["global gradient norm"])


def test_the_picture_goes_into_a_pipe(model, piped):
    """matplotlib's PNG writer seeks, which a pipe refuses: a health.png that is a FIFO ended in "File or stream is
    not seekable"."""
    pipe, received = piped("health.png")
    x, y = batch()
    monitor = health.Health(model, 1, pipe.parent, say=lambda line: None)
    model(ag.Tensor(x), ag.Tensor(y))[1].backward()
    monitor.after_backward(0, x)
    monitor.after_step(0)
    monitor.close()
    assert received()[:8] == b"\x89PNG\r\n\x1a\n"


def test_interval_zero_does_nothing(model, tmp_path):
    monitor = health.Health(model, 0, tmp_path)
    monitor.after_backward(0, batch()[0])
    monitor.after_step(0)
    monitor.close()
    assert list(tmp_path.iterdir()) == [] and monitor.records == []


def test_out_dir_may_be_a_string_as_the_docstring_passes_it(model, tmp_path):
    monitor = health.Health(model, 1, str(tmp_path / "out"))
    assert monitor.path == tmp_path / "out" / health.JSONL_FILE and not (tmp_path / "out").exists()
    train_steps(model, monitor, nn.optim.SGD(model.parameters(), lr=0.0), [0])  # the first record makes the folder
    assert [json.loads(line)["iter"] for line in monitor.path.read_text().splitlines()] == [0]


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


@pytest.mark.parametrize("interval, records", [(30, 3), (7, 9), (10, 6), (50, 2), (80, 2)])
def test_a_rule_holds_across_at_least_the_window_whatever_the_interval(model, tmp_path, interval, records):
    """At the interval 30 a rule warned after two records, 30 iterations, where the page says it holds across 50."""
    monitor = health.Health(model, interval, tmp_path)
    monitor.matrices = set()
    assert monitor.window_records == records
    said = judge(monitor, [fake_record(it, -2, 0.0, 0.05) for it in range(0, interval * records, interval)])
    assert said[:-1] == [[]] * (records - 1)
    assert said[-1] == [f"health: h.2: lowest head attention entropy 0.050 nats for {interval * (records - 1)} "
                        "iterations: the initialisation (or the learning rate) is likely too large: the scores q·k "
                        "are too wide"]
    assert interval * (records - 1) >= health.WINDOW


def test_gelu_saturation_later_in_the_run_gets_a_warning_of_its_own(model, tmp_path):
    monitor = health.Health(model, 25, tmp_path)
    monitor.records = [fake_record(it, -2, 0.0 if it < 75 else 0.2, 2.0) for it in range(0, 125, 25)]
    assert monitor.warnings() == []  # 75, 100: not yet held for the window
    monitor.records.append(fake_record(125, -2, 0.2, 2.0))
    assert monitor.warnings() == [
        "health: h.2: 20% of GELU inputs below -3 for 50 iterations: units sit where GELU is flat and barely "
        "learn: the learning rate may be too high, or the MLP has more units than the task uses"]


def train_steps(model, monitor, optimizer, iterations, cut=()):
    """Steps of `optimizer` on the batch, recorded by `monitor`; the parameters named in `cut` get a gradient of 0
    (as a layer that no path from the loss reaches)."""
    x, y = batch()
    named = dict(model.named_parameters())
    for it in iterations:
        optimizer.zero_grad()
        model(ag.Tensor(x), ag.Tensor(y))[1].backward()
        for name in cut:
            named[name].grad[...] = 0
        monitor.after_backward(it, x)
        optimizer.step()
        monitor.after_step(it)


def too_small(layers):
    return [f"health: {layer}: update/weight 0 (the step changed no value) for 2 iterations: the learning rate is "
            "likely too low, or the layer gets no gradient" for layer in layers]


def test_a_weight_that_never_changes_is_warned_about_as_the_smallest_update(model, tmp_path):
    lines = []
    monitor = health.Health(model, 1, tmp_path, say=lines.append, window=2)
    train_steps(model, monitor, nn.optim.SGD(model.parameters(), lr=0.0), range(3))
    assert lines == too_small(["wte", "wpe"] + [f"h.{i}.{layer}" for i in range(2)
                                               for layer in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")])
    figures = monitor.records[-1]["params"]["transformer.h.1.mlp.c_fc.weight"]
    assert figures["update_norm"] == 0.0 and figures["log10_update_ratio"] is None and figures["weight_norm"] > 0
    monitor.close()  # the picture draws an update of 0 on a line of its own
    assert (tmp_path / "health.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_layer_that_gets_no_gradient_is_warned_about_and_the_others_are_not(model, tmp_path):
    lines = []
    monitor = health.Health(model, 1, tmp_path, say=lines.append, window=2)
    optimizer = nn.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)  # ratios near 10^-2
    train_steps(model, monitor, optimizer, range(3), cut=["transformer.h.1.mlp.c_fc.weight"])
    assert lines == too_small(["h.1.mlp.c_fc"])
    assert [r["params"]["transformer.h.1.mlp.c_fc.weight"]["update_norm"] for r in monitor.records] == [0.0] * 3


def test_a_layer_that_gets_no_gradient_under_weight_decay_is_warned_about(model, tmp_path):
    """The main job's AdamW (weight decay 0.1) still shrinks a weight no gradient reaches, by lr·wd of it: its
    update ratio sat between 10^-5 and 10^-3.7 (models.train with h.1's c_fc cut off), above "update too small"'s
    10^-5, and nothing was said."""
    lines = []
    monitor = health.Health(model, 1, tmp_path, say=lines.append, window=2)
    optimizer = nn.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.1)  # models.train's
    train_steps(model, monitor, optimizer, range(3), cut=["transformer.h.1.mlp.c_fc.weight"])
    cut = [r["params"]["transformer.h.1.mlp.c_fc.weight"] for r in monitor.records]
    assert [f["grad_norm"] for f in cut] == [0.0] * 3
    assert all(-5 < f["log10_update_ratio"] < -3 for f in cut)  # decay alone: too large for "update too small"
    # (Adam's first steps move the tiny model's other weights by 10^-0.8 of them: "update too large" for those)
    assert [line for line in lines if "h.1.mlp.c_fc" in line] == [
        "health: h.1.mlp.c_fc: gradient 0 for 2 iterations: no path from the loss reaches the layer (a .detach(), "
        "a branch the loss does not use) or its units died"]


def test_a_gradient_of_0_is_drawn_on_a_line_below_the_others_not_dropped_by_the_log_scale(model, tmp_path, monkeypatch):
    """The log-scale gradient panel drew a layer whose gradient is 0 (no path reaches it, or its units died, as in
    a diverging run) at log 0 = −∞: its line vanished, looking like a layer that was never recorded."""
    import matplotlib.pyplot as plt
    monitor = health.Health(model, 1, tmp_path, say=lambda line: None)
    cut = "transformer.h.1.mlp.c_fc.weight"
    train_steps(model, monitor, nn.optim.SGD(model.parameters(), lr=1e-3), range(2), cut=[cut])
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    monitor.close()
    panel = figures[0].axes[1]
    weights = [n for n in monitor.records[0]["params"] if n in monitor.matrices]
    lines = dict(zip(weights, panel.get_lines()))
    lowest = min(r["params"][n]["grad_norm"] for r in monitor.records for n in weights if n != cut)
    assert list(lines[cut].get_ydata()) == [lowest / 10] * 2
    assert [t.get_text() for t in panel.get_legend().get_texts()] == ["gradient 0"]


def test_frozen_weights_are_not_recorded_nor_warned_about(model, tmp_path):
    nn.lora(model, 2, 4, ["c_attn"])  # every other weight frozen, as a LoRA run's base
    lines = []
    monitor = health.Health(model, 1, tmp_path, say=lines.append, window=2)
    trainable = [p for p in model.parameters() if p.requires_grad]
    train_steps(model, monitor, nn.optim.SGD(trainable, lr=0.0), range(3))
    adapters = [f"h.{i}.attn.c_attn.lora_{ab}" for i in range(2) for ab in "AB"]
    assert sorted(map(health.layer_name, monitor.records[-1]["params"])) == adapters
    assert sorted(lines) == too_small(adapters)  # the adapters, which do not learn at lr 0; no frozen weight


@pytest.mark.parametrize("trains", ["transformer.h.1.", "lora c_fc"])
def test_a_frozen_blocks_activations_are_measured_as_a_training_ones(model, trains):
    """The figures were read from the graph, where only ops that need a gradient are: with h.0 frozen (fine-tuning
    the top block) its block had no output and the record ended in KeyError 'output'; with LoRA adapters on c_fc
    alone (models.train --lora-targets c_fc) h.0's attention had no entropy, so its collapse went unseen."""
    if trains == "lora c_fc":
        nn.lora(model, 2, 4, ["c_fc"])
    else:
        for name, p in model.named_parameters():
            p.requires_grad = name.startswith(trains)
    requires = {name: p.requires_grad for name, p in model.named_parameters()}
    x, _ = batch()
    expected = direct_activations(model, x)
    got = health.activations(model, ag.Tensor(x))
    assert {name: p.requires_grad for name, p in model.named_parameters()} == requires  # left frozen as it was
    assert set(got) == set(expected) == {"transformer.h.0", "transformer.h.1"}
    for block, figures in expected.items():
        assert got[block]["std"] == pytest.approx(figures["std"], rel=1e-5)
        assert got[block]["gelu_below_-3"] == figures["gelu_below_-3"]
        np.testing.assert_allclose(got[block]["attention_entropy"], figures["attention_entropy"], rtol=1e-5)


def test_a_block_whose_gelu_is_cut_from_the_graph_is_recorded_with_a_null_fraction(model, tmp_path, monkeypatch):
    """A .detach() before h.1's GELU left it out of the graph, and its record without the figure: the report read
    its own first line back as 'not a record of this model's run' and drew no picture."""
    from models.gpt import gpt2
    forward = gpt2.MLP.forward

    def cut(self, x):
        if self._scope_name != "transformer.h.1.mlp":
            return forward(self, x)
        return self.c_proj(self.c_fc(x).detach().gelu())
    monkeypatch.setattr(gpt2.MLP, "forward", cut)
    lines = []
    monitor = health.Health(model, 1, tmp_path, say=lines.append)
    train_steps(model, monitor, nn.optim.SGD(model.parameters(), lr=1e-3), range(2))
    assert [r["blocks"]["transformer.h.1"]["gelu_below_-3"] for r in monitor.records] == [None, None]
    assert [r["blocks"]["transformer.h.0"]["gelu_below_-3"] for r in monitor.records] == [0.0, 0.0]
    monitor.close()
    assert [r["iter"] for r in monitor.history()] == [0, 1]
    assert lines == [f"wrote the health report to {tmp_path / 'health.jsonl'} and {tmp_path / 'health.png'}"]


def model_record(model, it, gelu=0.0, entropy=2.0):
    """A record of `model`'s run at iteration `it`: a healthy update, and its blocks' GELU and lowest head figures."""
    params = {name: {"grad_norm": 1.0, "weight_norm": 1.0, "update_norm": 1e-3, "log10_update_ratio": -3.0}
              for name, _ in model.named_parameters()}
    blocks = {f"transformer.h.{i}": {"mean": 0.0, "std": 1.0, "gelu_below_-3": gelu,
                                     "attention_entropy": [2.0, entropy]} for i in range(2)}
    return {"iter": it, "grad_norm": 1.0, "max_norm": 0.0, "clipped": False, "params": params, "blocks": blocks}


def judge(monitor, records):
    """The warnings `monitor` gives at each of `records`, in turn."""
    said = []
    for record in records:
        monitor.records.append(record)
        said.append(monitor.warnings())
    return said


def test_a_resumed_run_keeps_the_history_before_its_start_and_warns_as_the_uninterrupted_run(model, tmp_path):
    # GELU saturated from the start (0-50), the attention collapsed later (75-125), GELU near-dead again (125-175)
    records = [model_record(model, it, gelu=0.2 if it <= 50 or it >= 125 else 0.0, entropy=0.05 if 75 <= it <= 125
                            else 2.0) for it in range(0, 200, 25)]
    straight = judge(health.Health(model, 25, tmp_path / "straight"), records)
    assert straight[2] == [f"health: h.{i}: 20% of GELU inputs below -3 for 50 iterations: the initialisation is "
                           "likely too large: the pre-activations are too wide" for i in range(2)]
    assert [len(s) for s in straight] == [0, 0, 2, 0, 0, 2, 0, 0]  # near-dead: the start's warning said so
    # the run went on to 125 (and a crash cut its last line short), but its checkpoint is at iteration 75
    out_dir = tmp_path / "resumed"
    out_dir.mkdir()
    left = "".join(json.dumps(r) + "\n" for r in records[:6]) + '{"iter": 15'
    (out_dir / "health.jsonl").write_text(left)
    lines = []
    resumed = health.Health(model, 25, out_dir, say=lines.append, start=75)
    assert [r["iter"] for r in resumed.records] == [0, 25, 50] and lines == []
    assert (out_dir / "health.jsonl").read_text() == left  # until its first record (test_resumed_…_rewrites_…)
    assert judge(resumed, records[3:]) == straight[3:]


def test_a_resumed_run_rewrites_the_report_with_its_first_record_keeping_the_history(model, tmp_path):
    history = [json.dumps(model_record(model, it)) + "\n" for it in (0, 25, 50, 75)]
    (tmp_path / "health.jsonl").write_text("".join(history) + '{"iter": 10')  # the run went on past 50
    resumed = health.Health(model, 25, tmp_path, start=50)
    train_steps(model, resumed, nn.optim.SGD(model.parameters(), lr=0.0), [50])
    assert (tmp_path / "health.jsonl").read_text() == "".join(history[:2]) + json.dumps(resumed.records[-1]) + "\n"


def test_a_run_resumed_without_its_history_has_no_start_to_judge(model, tmp_path):
    records = [model_record(model, it, gelu=0.2) for it in range(75, 150, 25)]
    resumed = health.Health(model, 25, tmp_path, start=75)
    assert judge(resumed, records)[-1] == [
        f"health: h.{i}: 20% of GELU inputs below -3 for 50 iterations: units sit where GELU is flat and barely "
        "learn: the learning rate may be too high, or the MLP has more units than the task uses" for i in range(2)]


def _blocks(record, change):
    for figures in record["blocks"].values():
        change(figures)


@pytest.mark.parametrize("damage", [
    None,  # the line is no record at all
    lambda r: r["params"]["transformer.wte.weight"].update(grad_norm="1.0"),
    lambda r: r["params"].update({name: [1.0] for name in r["params"]}),
    lambda r: r.update(clipped="no"),
    lambda r: r.update(grad_norm=[1.0]),
    lambda r: r["blocks"].update({name: None for name in r["blocks"]}),
    lambda r: _blocks(r, lambda figures: figures.update(std="wide")),
    lambda r: _blocks(r, lambda figures: figures.pop("gelu_below_-3")),
    lambda r: _blocks(r, lambda figures: figures.update(attention_entropy=["low", 2.0])),
    lambda r: _blocks(r, lambda figures: figures.update(std=10 ** 400)),
])
def test_a_resumed_run_keeps_the_history_before_a_damaged_line_and_says_so(model, tmp_path, damage):
    """Among the damaged lines, records of the right iteration and names with a string, an array or nothing where a
    figure goes: they passed, and ended the resumed run in a TypeError (or KeyError) where its rules or its picture
    read that figure."""
    damaged = model_record(model, 25)
    if damage:
        damage(damaged)
    lines = [json.dumps(model_record(model, 0)), json.dumps(damaged) if damage else "not a record",
             json.dumps(model_record(model, 50))]
    (tmp_path / "health.jsonl").write_text("\n".join(lines) + "\n")
    said = []
    resumed = health.Health(model, 25, tmp_path, say=said.append, start=75)
    assert [r["iter"] for r in resumed.records] == [0]
    assert said == [f"health: line 2 of {tmp_path / 'health.jsonl'} is not a record of this model's run: the report "
                    "keeps the 1 before it"]
    train_steps(model, resumed, nn.optim.SGD(model.parameters(), lr=0.0), [75])
    assert (tmp_path / "health.jsonl").read_text() == lines[0] + "\n" + json.dumps(resumed.records[-1]) + "\n"


def test_the_monitor_keeps_only_the_window_and_draws_the_whole_run_from_the_report(model, tmp_path):
    """Every record stayed in memory for the picture: ~13 KB a step for the default model, 1 GB per 100k steps at
    --health-interval 1."""
    monitor = health.Health(model, 1, tmp_path, say=lambda line: None, window=2)
    seen = []
    for it in range(12):
        train_steps(model, monitor, nn.optim.SGD(model.parameters(), lr=1e-2), [it])
        seen.append(monitor.records[-1])
    assert [r["iter"] for r in monitor.records] == [9, 10, 11]  # the window the rules judge: 2 iterations
    assert monitor.history() == seen
    monitor.close()
    health.plot(tmp_path / "kept.png", seen, monitor.matrices)
    assert (tmp_path / "health.png").read_bytes() == (tmp_path / "kept.png").read_bytes()


def test_a_resumed_runs_picture_is_its_history_then_its_own_records(model, tmp_path):
    records = [model_record(model, it) for it in range(0, 150, 25)]
    (tmp_path / "health.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))  # the run went on to 125
    resumed = health.Health(model, 25, tmp_path, say=lambda line: None, start=75)
    assert resumed.history() == records[:3]  # nothing recorded yet: not the iterations it makes again
    train_steps(model, resumed, nn.optim.SGD(model.parameters(), lr=0.0), [75])
    assert resumed.history() == records[:3] + [json.loads(json.dumps(resumed.records[-1]))]


def test_a_fresh_run_starts_the_report_afresh_with_its_first_record(model, tmp_path):
    """An earlier run's report was emptied as the monitor was made: a run refused or interrupted before its
    first record (or one of --max-iters 0, which records nothing) lost it."""
    earlier = json.dumps(model_record(model, 0)) + "\n"
    (tmp_path / "health.jsonl").write_text(earlier)
    monitor = health.Health(model, 25, tmp_path)
    assert monitor.records == [] and (tmp_path / "health.jsonl").read_text() == earlier
    train_steps(model, monitor, nn.optim.SGD(model.parameters(), lr=0.0), [0])
    assert (tmp_path / "health.jsonl").read_text() == json.dumps(monitor.records[0]) + "\n" != earlier


def test_train_cli_resumed_continues_the_report_as_the_uninterrupted_run(tmp_path, capsys):
    """The records and the warnings of a run resumed at 60 are the uninterrupted run's; those that a run which went
    on past its checkpoint wrote after it are replaced."""
    hot = ["--lr", "0.1", "--eval-interval", "30", "--always-save", "--lr-decay-iters", "200", "--sample-tokens",
           "0", "--health-interval", "10"]

    def warned(*argv):
        assert train.main([*TINY, *hot, *argv]) == 0
        return [line for line in capsys.readouterr().out.splitlines() if line.startswith("health: ")]

    straight, split = tmp_path / "straight", tmp_path / "split"
    straight_warned = warned("--max-iters", "110", "--out-dir", str(straight))
    assert straight_warned  # the learning rate is high enough to warn (here: GELU near-dead, after iteration 60)
    split_warned = warned("--max-iters", "60", "--out-dir", str(split))
    later = [line for line in (straight / "health.jsonl").read_text().splitlines(keepends=True)
             if json.loads(line)["iter"] >= 60]
    with open(split / "health.jsonl", "a") as f:  # as a run that went on past its checkpoint at 60 left it
        f.write("".join(later) + later[0][:40])
    assert split_warned + warned("--resume", "--max-iters", "110", "--out-dir", str(split)) == straight_warned
    records = (split / "health.jsonl").read_text()
    assert [json.loads(line)["iter"] for line in records.splitlines()] == list(range(0, 110, 10))
    assert records == (straight / "health.jsonl").read_text()


def test_train_cli_overwrite_keeps_the_earlier_report_until_its_first_record(tmp_path, capsys, monkeypatch):
    """--overwrite emptied health.jsonl as training began, while the folder kept its checkpoint until the first
    save: a run of --max-iters 0, or one interrupted before its first record, lost the earlier run's report."""
    argv = [*TINY, "--out-dir", str(tmp_path), "--health-interval", "4", "--sample-tokens", "0"]
    assert train.main([*argv, "--max-iters", "8"]) == 0
    earlier = (tmp_path / "health.jsonl").read_text()
    assert [json.loads(line)["iter"] for line in earlier.splitlines()] == [0, 4]
    assert train.main([*argv, "--max-iters", "0", "--overwrite"]) == 0
    assert (tmp_path / "health.jsonl").read_text() == earlier
    real = train.accumulate_gradients

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "accumulate_gradients", interrupted)  # iteration 0: evaluated, not yet recorded
    assert train.main([*argv, "--max-iters", "8", "--overwrite", "--seed", "7"]) == 130
    assert (tmp_path / "health.jsonl").read_text() == earlier
    assert "train: interrupted; " + str(tmp_path) + " holds the checkpoint of iteration 8" in capsys.readouterr().err
    monkeypatch.setattr(train, "accumulate_gradients", real)
    assert train.main([*argv, "--max-iters", "4", "--overwrite", "--seed", "7"]) == 0  # records iteration 0 alone
    replaced = (tmp_path / "health.jsonl").read_text()
    assert [json.loads(line)["iter"] for line in replaced.splitlines()] == [0]
    assert replaced.splitlines()[0] != earlier.splitlines()[0]  # seed 7's record, not the earlier run's


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


@pytest.mark.parametrize("anomaly", [[], ["--detect-anomaly"]])
def test_train_cli_draws_the_report_of_a_run_that_diverged(tmp_path, capsys, anomaly):
    """A run stopped by a NaN loss (or by --detect-anomaly) wrote health.jsonl but no health.png: the picture of how
    the run blew up, the one a learner most needs, was missing."""
    code = train.main([*TINY, "--max-iters", "30", "--out-dir", str(tmp_path), "--health-interval", "1", "--lr", "1e3",
                       "--min-lr", "1e3", "--sample-tokens", "0", *anomaly])
    out, err = capsys.readouterr()
    assert code == 1 and "stopped, and" in err, err
    stopped_at = int(re.search(r"at (?:training )?iteration (\d+)", err).group(1))
    rows = [json.loads(line) for line in (tmp_path / "health.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in rows] == list(range(stopped_at))
    assert f"wrote the health report to {tmp_path / 'health.jsonl'} and {tmp_path / 'health.png'}\n" in out
    assert (tmp_path / "health.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_report_that_cannot_be_drawn_does_not_hide_why_the_run_stopped(tmp_path, capsys):
    """Its error replaced the run's: "[Errno 21] Is a directory" instead of the NaN loss and the checkpoint kept."""
    (tmp_path / "health.png").mkdir(parents=True)
    code = train.main([*TINY, "--max-iters", "30", "--out-dir", str(tmp_path), "--health-interval", "1", "--lr", "1e3",
                       "--min-lr", "1e3", "--sample-tokens", "0"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("train: the health report could not be drawn: Is a directory\ntrain: error: the loss "
                          "became nan at iteration "), err


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
