"""Where two runs of a model part, on its graph: `ag.diverge` for a module's demo_loss(), printed and drawn.

    python -m viz.diverge models.tiny --a fused --b composed
    python -m viz.diverge models.gpt2 --a float32 --b float64 --collapse
    python -m viz.diverge models.gpt2 --a fused,threads=1 --b composed,threads=2 --out parts.png
    python -m viz.diverge models.gpt2 --a float32 --b captured.npz    # arrays captured elsewhere, by module

A SETTING is a word, or words joined by commas: fused, composed, cpu, cuda,
float32, float64, threads=N. For --b, a .npz file of reference arrays keyed by
module name (e.g. saved from transformers' forward hooks) stands for run b.
The command prints the report's table (autograd/divergence.py says how the
expected drift is found) and writes the backward graph (viz.graph's picture)
with the op where the runs part forward, and the one where they part
backward, marked red, and the table beside it; SVG by default.
"""

if __name__ == "__main__":  # before the imports below: a Ctrl-C while they load, or while the options are parsed,
    from models.interrupts import exit_quietly_on_interrupt  # ends in one line, not a traceback
    exit_quietly_on_interrupt("viz.diverge")

import argparse
import sys
import zipfile
from pathlib import Path

import numpy as np

from autograd import divergence as engine

from .graph import (FORMATS, HIGHLIGHT, INSTALL_PYTHON, _graphviz, _write, dot_text, draw as draw_graph,
                    keep_gradients, picture_format)
from .loading import ModuleError, demo_of

WORDS = {"fused": ("fused", True), "composed": ("fused", False), "cpu": ("device", "cpu"),
         "cuda": ("device", "cuda"), "float32": ("dtype", "float32"), "float64": ("dtype", "float64")}


def parse_setting(text):
    """A `type=` function: 'fused,threads=2' → {"fused": True, "threads": 2}; each key once."""
    chosen = {}
    for word in (w.strip() for w in text.split(",")):
        if word.startswith("threads="):
            count = word[len("threads="):]
            if not count.isdigit() or int(count) < 1:
                raise argparse.ArgumentTypeError(f"{word!r}: threads=N takes a positive whole number")
            key, value = "threads", int(count)
        elif word in WORDS:
            key, value = WORDS[word]
        else:
            raise argparse.ArgumentTypeError(f"{word!r} is not a setting; use {', '.join(WORDS)} or threads=N, "
                                             "joined by commas")
        if key in chosen and chosen[key] != value:
            raise argparse.ArgumentTypeError(f"{text!r} sets {key} twice; give one of each")
        chosen[key] = value
    if chosen.get("device") == "cuda":
        from models.cli import device
        device("cuda")  # a GPU and CuPy, or the one line that says how to get them
    return chosen


class References(dict):
    """Arrays captured elsewhere, by module name: what --b gives instead of a setting."""


def parse_setting_or_reference(text):
    """--b: a setting, or a .npz file of reference arrays by module name."""
    if not text.endswith(".npz"):
        return parse_setting(text)
    from models.cli import input_file, machine_memory
    from models.io import check_npz_sizes
    path = input_file(text)
    if not zipfile.is_zipfile(path):  # np.load would read a lone .npy array, or take any other file for a pickle
        raise argparse.ArgumentTypeError(f"{text} is not a .npz archive; save the arrays with "
                                         "np.savez(path, **{module name: array})")
    memory = machine_memory()
    try:
        check_npz_sizes(path, memory, f"this machine's {(memory or 0) / 2 ** 30:.1f} GiB of memory")
        with np.load(path, allow_pickle=False) as arrays:
            references = References((name, arrays[name]) for name in arrays.files)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise argparse.ArgumentTypeError(f"{text}: cannot be read as reference arrays ({exc})") from None
    if not references:
        raise argparse.ArgumentTypeError(f"{text} holds no arrays; save each module's output by its name, "
                                         "e.g. np.savez(path, **{'transformer.h.0': array})")
    return references


def _table(report):
    """The report as a Graphviz HTML table: each phase's line, then its rows, the parting ones red."""
    columns = len(engine.COLUMNS)

    def line(text, bold=False):
        text = dot_text(text)
        return f'<TR><TD COLSPAN="{columns}" ALIGN="LEFT" BORDER="0">{"<B>" + text + "</B>" if bold else text}</TD></TR>'

    rows = [line(text, i == 0) for i, text in enumerate(engine.heading(report))]
    for phase in ("forward", "backward"):
        text, shown = engine.summary(report, phase)
        rows += [line(t, bold=(i == 0)) for i, t in enumerate(text)]
        if shown:
            rows.append("<TR>" + "".join(f"<TD><B>{dot_text(c)}</B></TD>" if c else "<TD></TD>"
                                         for c in engine.COLUMNS) + "</TR>")
            for c in shown:
                colour = f' BGCOLOR="{HIGHLIGHT}"' if c.parts else ""
                font = ('<FONT COLOR="white">', "</FONT>") if c.parts else ("", "")
                rows.append("<TR>" + "".join(f'<TD ALIGN="LEFT"{colour}>{font[0]}{dot_text(cell)}{font[1]}</TD>'
                                             for cell in engine.cells(c)) + "</TR>")
    return ('<<TABLE BORDER="1" COLOR="#bbbbbb" CELLBORDER="1" CELLSPACING="0" CELLPADDING="4">'
            + "".join(rows) + "</TABLE>>")


def draw(report, title=None, collapse=False, depth=None):
    """The recorded graph of `report` (ag.diverge's) with the parting ops marked and the table beside it: a
    graphviz.Digraph. Runs the recorded graph's backward first (graph kept), so that the boxes show gradients."""
    if report.root.grad is None:
        keep_gradients(report.root)
    graph = draw_graph(report.root, collapse=collapse, depth=depth, title=title, highlight=report.parting_ops())
    graph.node("diverge", label=_table(report), shape="plaintext", margin="0")
    return graph


def main(argv=None):
    from models.cli import Parser  # here, not at the top: draw() needs nothing from models
    from models.doors import stdout_reader_left
    from models.training.checkpoint import default_picture, picture_file
    p = Parser("python -m viz.diverge", "Run a model module's demo_loss() and its backward under two settings and "
                                        "find the first op, forward then backward, where the runs part beyond "
                                        "the drift a float64 run of the same graph predicts.",
               epilog=f"A SETTING: {', '.join(WORDS)} or threads=N, joined by commas (fused,threads=1). "
                      f"Drawing needs the Python package graphviz ({INSTALL_PYTHON}) and Graphviz's `dot`.")
    p.add_argument("module", help="a module defining demo_loss(), e.g. models.tiny (model.tiny works too)")
    p.add_argument("--a", type=parse_setting, metavar="SETTING", default="fused", help="how run a is made")
    p.add_argument("--b", type=parse_setting_or_reference, metavar="SETTING", default="composed",
                   help="how run b is made, or a .npz of reference arrays by module name")
    p.add_argument("--format", choices=FORMATS, help="output format (default: --out's suffix, else svg)")
    p.add_argument("--out", type=picture_file,
                   help="output file (default: diverge_<module>.<format> in the current directory)")
    p.add_argument("--collapse", action="store_true", help="fold each module into one box")
    p.add_argument("--depth", type=int, metavar="N",
                   help="draw only the ops within N hops of the loss (default: none, all of them)")
    args = p.parse_args(argv)
    if args.depth is not None and args.depth < 0:
        p.error(f"--depth must be at least 0, got {args.depth}")
    fmt = picture_format(p, args)
    reference = args.b if isinstance(args.b, References) else None
    try:
        _graphviz()
    except ImportError as exc:
        print(f"viz.diverge: error: {exc}", file=sys.stderr)
        return 1
    try:
        name, demo = demo_of(args.module)
    except ModuleError as exc:
        print(f"viz.diverge: error: {exc}", file=sys.stderr)
        return 1
    try:
        report = engine.diverge(demo, [], a=args.a, b=None if reference is not None else args.b, reference=reference)
    except (TypeError, ValueError, KeyError) as exc:  # a graph diverge cannot compare: the reason, in one line
        print(f"viz.diverge: error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 1
    print(report)
    graph = draw(report, title=f"{name}.demo_loss(): run a = {report.a}, run b = {report.b}",
                 collapse=args.collapse, depth=args.depth)
    out = Path(args.out or default_picture(p, f"diverge_{name.rsplit('.', 1)[-1]}.{fmt}"))
    try:
        return _write(graph, out, fmt)
    except OSError as exc:
        if stdout_reader_left(exc):  # `| head` has read enough of the picture or the "wrote …" line
            raise
        print(f"viz.diverge: error: cannot write {exc.filename or out}: {exc.strerror or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    from models.doors import run_main
    sys.exit(run_main(main, "viz.diverge"))
