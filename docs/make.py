"""python -m docs.make: draw every picture in docs/ afresh, from the commands the pages give.

    python -m docs.make              # all of them: the graphs in seconds, then two runs of the main job (minutes)
    python -m docs.make --graphs     # all but the two runs: the graphs and the single commands' pictures

Run it from the repository root. The graphs are the pictures of `python -m
viz.graph MODULE` (their demo losses are seeded, so each is the same on every
run); the two runs are the main job with `--health-interval 50` (health.png)
and with `--lr 100 --detect-anomaly` (anomaly_graph.svg, the NaN the debugging
page provokes); the pictures of viz.jacobian and viz.graph --flow are their
commands' own output, and two pictures show a fault planted as the page says
(a wrong VJP for gradcheck, a matmul kernel 0.1 % high for diverge). docs/pictures.json records, for each graph, a digest of its
Graphviz source with the digits left out (the last digit of a float32 norm may
differ between CPUs; a new op, label, name or colour may not), and for each
run its command and what it printed: tests/test_docs.py redraws the graphs'
sources and compares.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
RECORD = DOCS / "pictures.json"
# picture → (module whose demo_loss() it draws, draw()'s options): `python -m viz.graph MODULE [--collapse]`
GRAPHS = {
    "graph_neuron.svg": ("models.neuron", {}),
    "graph_moons.svg": ("models.moons", {}),
    "graph_bigram.svg": ("models.bigram", {}),
    "graph_tiny.svg": ("models.tiny", {}),
    "graph_gpt2_collapsed.svg": ("models.gpt2", {"collapse": True}),
}
# picture → (the command whose run makes it, the file of its --out-dir that is the picture)
RUNS = {
    "health.png": (["python", "-m", "models.train", "--health-interval", "50"], "health.png"),
    "anomaly_graph.svg": (["python", "-m", "models.train", "--lr", "100", "--detect-anomaly"], "anomaly_graph.svg"),
}

# picture → the command that writes it, given `--out docs/PICTURE`: a second or two each
COMMANDS = {
    **{f"jacobian_{op}.png": ["python", "-m", "viz.jacobian", op]
       for op in ("softmax", "masked_softmax", "log_softmax", "cross_entropy", "layer_norm", "gelu", "tanh",
                  "embedding", "matmul", "attention")},
    "flow_tiny.svg": ["python", "-m", "viz.graph", "models.tiny", "--flow", "E"],
    "flow_gpt2_collapsed.svg": ["python", "-m", "viz.graph", "models.gpt2", "--collapse", "--flow",
                                "transformer.wte.weight"],
}


def _wrong_vjp_picture(path):
    """gradcheck's picture of a VJP that gives 3x·g where 2x·g is right."""
    import numpy as np

    import autograd as ag

    class WrongSquare(ag.Function):
        def forward(self, x):
            self.save(x)
            return x * x

        def backward(self, g):
            return 3 * self.saved[0] * g
    x = ag.Tensor(np.arange(6.0).reshape(2, 3) / 4, requires_grad=True)
    try:
        ag.gradcheck(lambda t: WrongSquare.apply(t), [x], picture=path)
    except ag.GradcheckError:
        return
    sys.exit("docs.make: the wrong VJP passed gradcheck, so there is no picture of it")


def _planted_kernel_picture(path):
    """viz.diverge's picture of GPT-2's demo, fused against composed, the CPU's matmul kernel planted 0.1 % high
    (as tests/autograd/test_divergence.py plants it)."""
    import numpy as np

    import autograd as ag
    from autograd import kernels
    from viz import diverge
    from viz.loading import demo_of

    original = kernels._cpu_kernel

    def high(a, b, bias=None):
        return (a @ b if bias is None else a @ b + bias) * np.float32(1.001)
    kernels._cpu_kernel = lambda name, array: high if name == "matmul" else original(name, array)
    try:
        name, demo = demo_of("models.gpt2")
        report = ag.diverge(demo, [], a={"fused": True}, b={"fused": False})
    finally:
        kernels._cpu_kernel = original
    graph = diverge.draw(report, title=f"{name}.demo_loss(), the CPU's matmul kernel planted 0.1 % high: "
                                       f"run a = {report.a}, run b = {report.b}", collapse=True)
    Path(path).write_bytes(graph.pipe(format="svg"))


# picture → a function that draws it into the path given
PLANTED = {"gradcheck_picture.png": _wrong_vjp_picture, "diverge_gpt2_planted.svg": _planted_kernel_picture}


def graph(picture):
    """The graphviz.Digraph of `picture`, exactly as `python -m viz.graph` draws it."""
    from viz.graph import build_demo, draw, title_of

    module, options = GRAPHS[picture]
    name, loss = build_demo(module)
    return draw(loss, title=title_of(name, loss, backward=True), **options)


def digest(source):
    """SHA-256 of a Graphviz source with every run of digits as one mark: its structure and words."""
    return hashlib.sha256(re.sub(r"\d+", "#", source).encode("utf-8")).hexdigest()


def draw_graphs(record):
    for picture in GRAPHS:
        g = graph(picture)
        (DOCS / picture).write_bytes(g.pipe(format="svg"))
        record[picture] = {"command": f"python -m viz.graph {GRAPHS[picture][0]}"
                                      + (" --collapse" if GRAPHS[picture][1] else ""),
                           "dot_digest": digest(g.source)}
        print(f"wrote docs/{picture}")


def draw_commands(record):
    for picture, command in COMMANDS.items():
        argv = [sys.executable, *command[1:], "--out", str(DOCS / picture)]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"docs.make: {' '.join(command)} failed (exit {done.returncode}):\n{done.stderr}")
        record[picture] = {"command": " ".join(command)}
        print(f"wrote docs/{picture}")
    for picture, make in PLANTED.items():
        make(DOCS / picture)
        record[picture] = {"command": f"docs.make's {make.__name__}"}
        print(f"wrote docs/{picture}")


def run_jobs(record):
    for picture, (command, made) in RUNS.items():
        with tempfile.TemporaryDirectory(prefix="gptgrad-docs-") as tmp:
            out = Path(tmp) / "out"
            argv = [sys.executable, *command[1:], "--out-dir", str(out)]
            done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"})
            if not (out / made).is_file():
                sys.exit(f"docs.make: {' '.join(command)} made no {made} (exit {done.returncode}):\n{done.stderr}")
            shutil.copyfile(out / made, DOCS / picture)
        # what the run printed, the out-dir shown as the pages' commands name it: the pages quote these lines
        printed = (done.stdout + done.stderr).replace(str(out), "out")
        record[picture] = {"command": " ".join(command), "printed": printed.splitlines()}
        print(f"wrote docs/{picture} ({' '.join(command)})")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m docs.make", description=__doc__.splitlines()[0])
    p.add_argument("--graphs", action="store_true",
                   help="draw the backward graphs and the pictures of single commands only, not the two training runs")
    args = p.parse_args(argv)
    if shutil.which("dot") is None:
        sys.exit("docs.make: needs Graphviz's dot (apt-get install graphviz)")
    record = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
    draw_graphs(record)
    draw_commands(record)
    if not args.graphs:
        run_jobs(record)
    RECORD.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
