"""Pictures for `autograd.detect_anomaly`: the graph around the op that made the first NaN/inf, and the trace page.

    import autograd as ag
    from viz.anomaly import pictures

    with ag.detect_anomaly(pictures=pictures("out")):
        loss.backward()
    # AnomalyError: detect_anomaly: backward of Log (step 5 of backward) ...
    #   graph: out/anomaly_graph.svg
    #   trace page: out/anomaly_trace.html

autograd cannot import viz (it is the bottom layer), so the caller hands this
hook to detect_anomaly, which calls it with the `Anomaly` before raising.
It writes:
- anomaly_graph.svg: the backward graph below the culprit's output, `depth`
  ops deep, the culprit op with a thick red border (for a backward anomaly,
  the gradient that came into it and those it sent its inputs);
- anomaly_trace.html (a backward anomaly): the trace page of the whole pass
  (viz.trace_page), opening at the culprit's step.
Without Graphviz's `dot` it writes the graph's .dot source and no page.
"""
import shutil
from pathlib import Path

from autograd.anomaly import summary
from models.io import atomic_path

from .graph import draw
from .trace import trace
from .trace_page import write_page

GRAPH_FILE, TRACE_FILE = "anomaly_graph", "anomaly_trace.html"


def pictures(directory, depth=3):
    """A `pictures` hook for detect_anomaly that writes into `directory` (made if missing): {what: path}."""
    directory = Path(directory)

    def write(anomaly):
        directory.mkdir(parents=True, exist_ok=True)
        where = f" in {anomaly.scope}" if anomaly.scope else ""
        step = f", step {anomaly.step} of backward" if anomaly.step else ""
        title = f"{anomaly.phase} anomaly: {anomaly.op.name}{where}{step} (red border); {anomaly.culprit} went non-finite"
        graph = draw(anomaly.output, depth=depth, title=title, highlight=(anomaly.op,), grads=grad_lines(anomaly))
        if shutil.which("dot") is None:
            path = directory / f"{GRAPH_FILE}.dot"
            with atomic_path(path) as tmp:  # never a half-written picture
                tmp.write_text(graph.source, encoding="utf-8")
            return {"graph source (install Graphviz's dot to render it)": str(path)}
        path = directory / f"{GRAPH_FILE}.svg"
        with atomic_path(path) as tmp:
            tmp.write_bytes(graph.pipe(format="svg"))
        files = {"graph": str(path)}
        if anomaly.phase == "backward" and anomaly.step:
            page = directory / TRACE_FILE
            write_page(trace(anomaly.root, anomaly.root_grad), page, title, start=anomaly.step)
            files["trace page"] = str(page)
        return files

    return write


def grad_lines(anomaly):
    """draw's `grads` for the graph around an anomaly: for a backward one, each box's gradient line (into the culprit
    came `anomaly.grad`, and it sent its inputs `anomaly.sent`, the non-finite one among them; the pass stopped
    there, so below them no gradient has arrived yet, not "backward not run"); None for a forward one, whose boxes
    have no gradient to show."""
    if anomaly.phase != "backward":
        return None
    came = f"g into {anomaly.op.name}: {summary(anomaly.grad)}" if anomaly.grad is not None else None
    sent = {id(x): g for x, g in zip(anomaly.op.inputs or (), anomaly.sent) if g is not None}

    def lines(t):
        if t is anomaly.output and came:
            return [came]
        if id(t) in sent:
            return [f"g from {anomaly.op.name}: {summary(sent[id(t)])}"]
        return [f"no grad yet: backward stopped at step {anomaly.step}"]
    return lines
