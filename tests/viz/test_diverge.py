"""python -m viz.diverge: the report printed, the parting op marked on the graph beside the table."""
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("graphviz", reason='the Python package graphviz is not installed: pip install -e ".[viz]"')

import autograd as ag  # noqa: E402
from tests.autograd.test_divergence import matmul_a_thousandth_high, plant, small_model  # noqa: E402
from tests.models.test_untrusted import add_npz_entry  # noqa: E402
from tests.viz.test_graph import needs_dot, nodes  # noqa: E402
from viz import diverge as vd  # noqa: E402
from viz.graph import HIGHLIGHT  # noqa: E402


@needs_dot
def test_tiny_fused_against_composed_runs_and_draws(tmp_path, capsys):
    out = tmp_path / "tiny.svg"
    assert vd.main(["models.tiny", "--a", "fused", "--b", "composed", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    # float64 on the CPU has no fused kernels: the two runs are the same array calls
    assert "forward: no op parts; the runs agree to the bit at all 23 ops" in printed
    assert "backward: no op parts; the runs agree to the bit at all 23 ops" in printed
    svg = out.read_text()
    assert "diverge: run a = fused, run b = composed" in svg and "CrossEntropy" in svg


def test_the_parting_op_is_marked_and_the_table_beside_it(monkeypatch):
    plant(monkeypatch, "matmul", matmul_a_thousandth_high)
    report = ag.diverge(small_model(), a={"fused": True}, b={"fused": False})
    graph = vd.draw(report)
    marked = [key for key, attrs in nodes(graph).items() if f'color="{HIGHLIGHT}"' in attrs and "penwidth=5" in attrs]
    assert len(marked) == 2  # forward's MatMul and backward's CrossEntropy
    assert any("<B>MatMul</B>" in nodes(graph)[key] for key in marked)
    table = next(line for line in graph.body if line.lstrip().startswith("diverge "))
    assert re.search(rf'BGCOLOR="{HIGHLIGHT}"><FONT COLOR="white">MatMul</FONT>', table)
    assert "the runs part first at #2 MatMul in head" in table


@pytest.mark.parametrize("setting, parsed", [
    ("fused", {"fused": True}), ("composed,threads=2", {"fused": False, "threads": 2}),
    ("float64, cpu", {"dtype": "float64", "device": "cpu"}),
])
def test_settings_are_words_joined_by_commas(setting, parsed):
    assert vd.parse_setting(setting) == parsed


@pytest.mark.parametrize("argv, message", [
    (["models.tiny", "--a", "fast", "--b", "composed"], "'fast' is not a setting"),
    (["models.tiny", "--a", "fused,composed", "--b", "cpu"], "sets fused twice"),
    (["models.tiny", "--a", "threads=0", "--b", "cpu"], "threads=N takes a positive whole number"),
    (["models.tiny", "--a"], "argument --a: expected one argument"),
    (["models.tiny", "--a", "fused", "--b", "missing.npz"], "missing.npz"),
    (["models.tiny", "--b", "empty.npz"], "empty.npz holds no arrays; save each module's output by its name"),
    # np.load took a text file for a pickle (and said to allow_pickle), ended in a traceback on an empty file,
    # and returned a lone .npy's ndarray, no context manager ("invalid … value")
    *((["models.tiny", "--b", f"{name}.npz"], f"argument --b: {name}.npz is not a .npz archive; save the arrays "
       "with np.savez(path, **{module name: array}) (see --help)") for name in ("text", "blank", "lone")),
    (["models.tiny", "--format", "svg", "--out", "parts.png"], "--format svg but --out parts.png names a .png file"),
])
def test_bad_settings_are_refused_before_any_work(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.savez("empty.npz")
    Path("text.npz").write_text("module,output\ntransformer.h.0,1.5\n")
    Path("blank.npz").write_bytes(b"")
    with open("lone.npz", "wb") as f:
        np.save(f, np.zeros(3))
    with pytest.raises(SystemExit) as exit_info:
        vd.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("make, message", [
    # NumPy allocated what the header claims first: a traceback, "Unable to allocate 3.64 TiB"
    (lambda path: add_npz_entry(path, "attn.npy", (10 ** 12,), b"", compress=False),
     "(entry attn.npy claims a (1000000000000,) float32 array, more than its 128 bytes hold)"),
    # it unpacked whole, whatever the machine had
    (lambda path: add_npz_entry(path, "attn.npy", (2 ** 25,), bytes(2 ** 27)),
     "(it unpacks to 134,217,856 bytes, more than this machine's 0.1 GiB of memory)"),
    # np.load refused it, but with "negative dimensions are not allowed", naming no entry
    (lambda path: add_npz_entry(path, "attn.npy", (-1, 10 ** 15), b"", compress=False),
     "(entry attn.npy claims the shape (-1, 1000000000000000), with a negative length)"),
], ids=["header", "bomb", "negative"])
def test_reference_arrays_beyond_memory_are_refused_before_they_are_unpacked(make, message, capsys, tmp_path,
                                                                               monkeypatch):
    monkeypatch.setattr("models.cli.machine_memory", lambda: 2 ** 30 // 10)
    make(tmp_path / "captured.npz")
    with pytest.raises(SystemExit) as exit_info:
        vd.main(["models.tiny", "--b", str(tmp_path / "captured.npz")])
    assert exit_info.value.code == 2
    assert f"argument --b: {tmp_path / 'captured.npz'}: cannot be read as reference arrays {message}" in (
        capsys.readouterr().err)


@needs_dot
def test_reference_arrays_from_a_file_stand_for_run_b(tmp_path, capsys):
    import models.lessons.tiny as tiny
    steps = {}
    tiny.TinyTransformer()(tiny.INPUT_IDS, steps=steps)
    path = tmp_path / "captured.npz"
    np.savez(path, **{"attn": steps["attn_out"].data * 1.01, "ffn": steps["ffn_out"].data})
    assert vd.main(["models.tiny", "--a", "float64", "--b", str(path), "--out", str(tmp_path / "d.svg")]) == 0
    printed = capsys.readouterr().out
    assert "run b = reference arrays" in printed
    assert "forward: the runs part first at #11 MatMul in attn" in printed


@needs_dot
def test_a_nan_in_the_reference_arrays_is_named_in_the_print_and_the_picture(tmp_path, capsys):
    """'its output differs by inf, inf × the drift float32 alone has there': no word of the nan planted."""
    import models.lessons.tiny as tiny
    steps = {}
    tiny.TinyTransformer()(tiny.INPUT_IDS, steps=steps)
    attn = steps["attn_out"].data.copy()
    attn[1, 0] = np.nan
    np.savez(tmp_path / "captured.npz", attn=attn, ffn=steps["ffn_out"].data)
    out = tmp_path / "d.svg"
    assert vd.main(["models.tiny", "--a", "float64", "--b", str(tmp_path / "captured.npz"), "--out", str(out)]) == 0
    said = ("forward: the runs part first at #11 MatMul in attn (step 1 of 2 in forward order): its output differs "
            "by inf: nan or ±inf in one run, where the other has another value")
    assert said + "\n" in capsys.readouterr().out
    assert said in out.read_text()  # the table beside the graph


def test_collapsed_the_module_box_that_holds_the_parting_op_is_marked(monkeypatch):
    import models.gpt.gpt2 as gpt2
    plant(monkeypatch, "matmul", matmul_a_thousandth_high)
    report = ag.diverge(gpt2.demo_loss, a={"fused": True}, b={"fused": False})
    assert (report.forward.op, report.forward.scope) == ("Linear", "transformer.h.0.attn.c_attn")
    marked = [attrs for attrs in nodes(vd.draw(report, collapse=True)).values() if f'color="{HIGHLIGHT}"' in attrs]
    assert any("<B>transformer.h.0</B>" in attrs for attrs in marked)


@needs_dot
def test_a_modules_name_shows_in_the_table_as_typed(monkeypatch):
    """The table escaped & < > but not Graphviz's backslashes (\\N drew the node's name) nor control characters
    (a syntax error: no picture)."""
    import xml.etree.ElementTree as ET
    from tests.autograd.test_divergence import IDS, TARGETS
    rng = np.random.default_rng(0)
    table = ag.Tensor(rng.standard_normal((6, 4)).astype(np.float32), requires_grad=True)
    weight = ag.Tensor(rng.standard_normal((4, 6)).astype(np.float32), requires_grad=True)
    scope = "<head>\\N\x01"

    def loss():
        x = ag.embedding(table, IDS)
        with ag.name_scope(scope):
            h = (x @ weight).tanh()
        return ag.cross_entropy(h, TARGETS)

    plant(monkeypatch, "matmul", matmul_a_thousandth_high)
    svg = ET.fromstring(vd.draw(ag.diverge(loss, a={"fused": True}, b={"fused": False})).pipe(format="svg"))
    texts = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert any(t.startswith("forward: the runs part first at #2 MatMul in <head>\\N\\x01 (step 2") for t in texts)
    assert texts.count("<head>\\N\\x01") >= 2  # the module's frame and its column in the table
