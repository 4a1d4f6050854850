"""The viz tools on what they were given: an input read twice gets an arrow per read, a name is shown as it is
(placeholders included), and an option a tool cannot honour is refused in one line, not ignored or a traceback."""
import json
import re
import shutil
import sys

import numpy as np
import pytest

pytest.importorskip("graphviz", reason='the Python package graphviz is not installed: pip install -e ".[viz]"')

import autograd as ag  # noqa: E402
from autograd import Tensor, Value  # noqa: E402
from viz import diverge as vd, graph as vg, jacobian as vj, trace as vt  # noqa: E402
from viz.trace_page import write_page  # noqa: E402


def arrows(source):
    return re.findall(r"^\s*(\w+) -> (\w+)(?: \[(.*)\])?$", source, re.M)


def test_a_value_read_twice_gets_an_arrow_per_read():
    a = Value(3.0, name="a")
    b = a * a
    b.backward()
    into_a = [attrs for x, y, attrs in arrows(vg.draw(b).source) if y == "v1"]
    assert len(into_a) == 2 and all("× 3" in attrs for attrs in into_a)  # 3 + 3 = a.grad, 6


def test_a_tensor_read_twice_gets_both_roles_drawn():
    t = Tensor(np.ones(3), requires_grad=True)
    source = vg.draw((t * t).sum()).source
    labels = sorted(attrs for x, y, attrs in arrows(source) if y == "t1")
    assert [re.search(r"label=(\w+)", a).group(1) for a in labels] == ["x", "y"]
    # folding and cutting keep the graph drawable with the two arrows
    vg.draw((t * t).sum(), collapse=True, depth=1)


def test_placeholders_in_a_name_are_not_filled_in(tmp_path):
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's `dot` is not installed (apt-get install graphviz)")
    x = Tensor(np.ones(2), requires_grad=True)
    x.name = "{{data}}{{svg}}"
    loss = (x * 2.0).sum()
    out = tmp_path / "p.html"
    write_page(vt.trace(loss), out, "{{svg}} {{data}}")
    page = out.read_text(encoding="utf-8")
    assert page.count('<script id="trace-data"') == 1 and page.count("<svg") == 1
    data = re.search(r'<script id="trace-data" type="application/json">(.*?)</script>', page, re.S).group(1)
    json.loads(data)
    assert "{{data}}{{svg}}" in page  # the name itself, shown as it is


def test_value_graphs_refuse_depth_collapse_highlight_and_flow():
    v = Value(2.0) * Value(3.0)
    for kw in ({"depth": 1}, {"depth": 0}, {"collapse": True}, {"collapse": 2}, {"highlight": (v,)},
               {"flow": True}, {"flow_to": v}):
        with pytest.raises(TypeError, match=rf"draw: {next(iter(kw))}= are for a Tensor's graph, not a Value's; "
                                            "drop them"):
            vg.draw(v, **kw)


@pytest.mark.parametrize("flag", [["--depth", "1"], ["--depth", "0"], ["--collapse"], ["--collapse-depth", "2"],
                                  ["--collapse", "--collapse-depth", "2"]])
def test_the_cli_refuses_value_graph_options(flag, tmp_path, capsys):
    """--depth 0 passed the CLI's own check (0 in (False, None)) and reached draw's: a TypeError traceback."""
    assert vg.main(["models.neuron", "--out", str(tmp_path / "n.dot"), *flag]) == 1
    err = capsys.readouterr().err
    named = ", ".join(f for f in flag if f.startswith("--"))
    assert err == (f"viz.graph: error: {named} fold or cut a tensor graph; models.neuron.demo_loss() is a Value, "
                   "whose graph is drawn whole: drop them\n")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("flag", [["--flow"], ["--flow", "x1"], ["--flow", "--depth", "1"]])
def test_the_cli_refuses_flow_on_a_value_graph(flag, tmp_path, capsys):
    assert vg.main(["models.neuron", "--out", str(tmp_path / "n.dot"), *flag]) == 1
    assert capsys.readouterr().err == ("viz.graph: error: --flow draws a tensor graph's shares; "
                                       "models.neuron.demo_loss() is a Value (viz.trace's page shows each part of "
                                       "its sums)\n")
    assert not list(tmp_path.iterdir())


def test_jacobian_seed_out_of_range_is_refused_at_parse_time(capsys):
    with pytest.raises(SystemExit):
        vj.main(["softmax", "--seed", "-1"])
    assert "--seed: must be in [0, 4294967295], got -1" in capsys.readouterr().err


def test_jacobian_shape_message_says_what_is_accepted(capsys):
    with pytest.raises(SystemExit):
        vj.main(["tanh", "--shape", "1,1,1,1"])
    err = capsys.readouterr().err
    assert "tanh takes x: 1 to 3 axes" in err and "any shape" not in err


def test_jacobian_suffix_is_case_insensitive(tmp_path, capsys):
    out = tmp_path / "j.PNG"
    assert vj.main(["tanh", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_diverge_refuses_a_value_module_in_one_line(capsys, tmp_path):
    assert vd.main(["models.neuron", "--out", str(tmp_path / "n.svg")]) == 1
    err = capsys.readouterr().err
    assert err == ("viz.diverge: error: diverge: only Tensor graphs can be compared (ops with fused and composed "
                   "forms, float32 and float64); fn returned a chapter-one Value: build the loss from Tensors\n")


@pytest.mark.parametrize("tool, argv", [(vg, ["models.tiny"]), (vd, ["models.tiny"])])
def test_without_the_graphviz_package_the_tool_names_itself_and_the_install(tool, argv, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "graphviz", None)  # import graphviz raises ImportError
    assert tool.main(argv) == 1
    err = capsys.readouterr().err
    prog = tool.__name__
    assert err.startswith(f"{prog}: error: drawing the graph needs the Python package `graphviz`: pip install ")
    assert err.count("\n") == 1


@pytest.mark.parametrize("name", ["x.png", "x.HTML.txt"])
def test_trace_html_needs_an_html_suffix(name, tmp_path, capsys):
    with pytest.raises(SystemExit):
        vt.main(["models.tiny", "--html", str(tmp_path / name)])
    assert "name it with .html or .htm" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_draw_checks_highlight_and_depth_types():
    t = Tensor(np.ones(3), requires_grad=True)
    loss = (t * 2.0).sum()
    with pytest.raises(TypeError, match=r"draw: highlight must be a tuple .*pass highlight=\(t,\)"):
        vg.draw(loss, highlight=t)
    with pytest.raises(TypeError, match=r"draw: depth must be an int .* got '2'"):
        vg.draw(loss, depth="2")
    vg.draw(loss, highlight=[t], depth=1)
    with pytest.raises(TypeError, match=r"^draw: expected an autograd Tensor or Value, got int; pass the loss .*"
                                        r"draw\(loss\)$"):
        vg.draw(3)


DEMO = "tests.viz.demo_module"


@pytest.mark.parametrize("argv", [["viz.trace", DEMO], ["viz.diverge", DEMO, "--out", "d.svg"],
                                  ["viz.graph", DEMO, "--out", "g.svg"], ["viz.jacobian", "gelu", "--out", "j.png"],
                                  ["viz.trace", DEMO, "--html", "/dev/stdout"],
                                  ["viz.diverge", DEMO, "--format", "png", "--out", "/dev/stdout"],
                                  ["viz.graph", DEMO, "--format", "png", "--out", "/dev/stdout"],
                                  ["viz.jacobian", "gelu", "--out", "/dev/stdout"]])
def test_output_to_a_reader_that_has_gone_ends_quietly(argv, tmp_path):
    """`python -m viz.diverge … | head`: its table's print raised BrokenPipeError (a traceback), and a "wrote …" line
    that could not be printed was reported as "cannot write d.svg: Broken pipe", the file written. The picture
    itself sent to that reader (`--out /dev/stdout | head`) said "cannot write /dev/stdout: Broken pipe" (viz.trace,
    viz.jacobian). The reader is gone from the start here."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([sys.executable, "-m", *argv], stdout=write, stderr=subprocess.PIPE, text=True,
                                cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}, timeout=300)
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.parametrize("command", ["viz.graph", "viz.diverge"])
def test_a_picture_into_a_fifo_whose_reader_left_is_one_line(command, tmp_path):
    """Not standard output's reader: the picture could not be written whole, which is an error, said in one line.
    viz.graph let the BrokenPipeError through to a traceback, as if it had been its output's `| head`."""
    import os
    import subprocess
    import sys
    import threading
    from pathlib import Path
    fifo = tmp_path / "picture"
    os.mkfifo(fifo)

    def read_a_byte_and_leave():
        with open(fifo, "rb") as reader:
            reader.read(1)
    reader = threading.Thread(target=read_a_byte_and_leave, daemon=True)
    reader.start()
    result = subprocess.run([sys.executable, "-m", command, DEMO, "--format", "png", "--out", str(fifo)],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    reader.join(timeout=10)
    assert (result.returncode, result.stderr) == (1, f"{command}: error: cannot write {fifo}: Broken pipe\n")


# Names as users write them: markup, DOT's own escapes (\l ends a line, \N draws the node's name), entities,
# quotes, a backslash at the end, control characters, a lone surrogate, long, emoji and right-to-left text
NAMES = ["<script>alert(1)</script>", 'a"b', "x\ny", "{}|<>", "a\\lb", "a\\", "&amp;", "&#60;b&#62;", "\\N\\G",
         "a\x00b\x1bc", "\udcff", "n" * 5000, "😀 שלום"]
SVG, XLINK = "{http://www.w3.org/2000/svg}", "{http://www.w3.org/1999/xlink}"


def drawn_text(graph):
    """{SVG <title> of each node, frame and the graph: (its lines of text, its tooltip)}; the SVG must parse."""
    import xml.etree.ElementTree as ET
    root = ET.fromstring(graph.pipe(format="svg"))
    return {g.find(SVG + "title").text: ([t.text for t in g.iter(SVG + "text")],
                                         next((a.get(XLINK + "title") for a in g.iter(SVG + "a")), None))
            for g in root.iter(SVG + "g") if g.find(SVG + "title") is not None}


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's `dot` is not installed")
@pytest.mark.parametrize("name", NAMES)
def test_a_name_a_module_and_a_title_are_drawn_letter_for_letter(name):
    """`<…>` as a title or a module's name was taken for DOT's HTML syntax, a backslash at the end ate the rest of
    the line, a control character was a syntax error: no picture. \\N drew the node's name, &amp; an &."""
    shown = name.encode("unicode_escape").decode("ascii") if name in ("x\ny", "a\x00b\x1bc", "\udcff") else name
    x = Tensor(np.ones(2), requires_grad=True)
    x.name = name
    with ag.name_scope(name):
        y = (x * 2.0).tanh()
    loss = y.sum()
    texts = drawn_text(vg.draw(loss, title=name))
    assert texts["backward"][0][0] == shown  # the title, the graph's first text
    assert texts["cluster_0"][0] == [shown]  # the module's frame
    assert texts["t1"][0][0] == shown and texts["t1"][1].startswith(f"{shown}: (2,) float64\n")
    assert texts["op2"][1].startswith(f"recorded in {shown}\n")
    vg.keep_gradients(loss)
    assert drawn_text(vg.draw(loss, collapse=True))["module1"][0][0] == shown
    a = Value(2.0, name=name)
    assert drawn_text(vg.draw((a * a).tanh(), title=name))["v1"][0][0] == shown


def test_a_newline_in_a_name_makes_no_line_of_its_own_in_the_trace():
    x = Tensor(np.ones(2), requires_grad=True)
    x.name = "x\nstep 9/9  Fake"
    with ag.name_scope("block\n"):
        loss = (x * 2.0).sum()
    text = vt.format_trace(vt.trace(loss))
    assert [line for line in text.splitlines() if line.startswith("step")] == [
        "step 1/2  Sum   [block\\n]", "step 2/2  Mul   [block\\n]"]
    assert "  x\\nstep 9/9  Fake.grad  (2,)  [2.000000, 2.000000]" in text.splitlines()
