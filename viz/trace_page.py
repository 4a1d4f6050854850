"""The trace of backward as one self-contained web page: step through it on the graph's picture.

    python -m viz.trace models.tiny --html trace.html
    python -m viz.trace models.neuron --html neuron.html     # a Value graph, the same page

`write_page(steps, path, title, start=1)` takes a trace, `viz.trace.trace(loss)`
(this module reads a trace and never makes one: viz.trace imports it, not the
other way round), and renders the backward graph (Graphviz's `dot`, as
viz.graph draws it) as SVG inside a single HTML file with its own CSS and
script: nothing is fetched from the network. Each step of the trace is one
view: the op being run is highlighted, with the tensor whose gradient comes
in and the inputs it sends gradients to; a side panel shows the incoming
gradient g, the rule with the saved forward values it reads, and every
outgoing gradient, the same numbers `python -m viz.trace` prints, with the
same notes (summed back over broadcast axes, part k of n of a sum).

The picture shows the gradients known at that step only: a box backward has
not reached yet says "grad —", and one whose gradient is a sum shows the
running total of the parts that have arrived, "grad (2 of 3 parts): …",
added in the engine's order (the last total is the engine's gradient to the
bit); the panel gives each part its share of the total, ⟨part, total⟩/‖total‖²
(viz/flow.py), the shares of a sum adding up to 1. The op being run is scrolled well inside the picture, with the boxes
around it wherever they fit; in the leaves' view, likewise, the first leaf, with the others wherever they fit.

Entry points: buttons and the ← → keys step back and forth (Home and End jump
to the ends); the page opens at step `start` (1 is the loss's op, the number
of steps + 1 the leaves' view), or at the step its address names,
`trace.html#step=7`, which it keeps up to date as you step, so an address
can be copied and shared.
"""
import html
import json
import re
import shutil

from autograd import Value
from models.io import atomic_path

from .flow import share, shares_text
from .graph import INSTALL_DOT, draw, grad_rows, node_keys
from .numbers import shape_text, summary_text, values_text
from .walk import grad_of, walk_of

NOT_YET = "grad —"  # a box before backward reaches it


def _array(array, max_values, decimals):
    """{shape, text}: the values for a small array, its shape and norm for a large one (as the text trace);
    a Value's number (a float) with no shape."""
    if isinstance(array, float):
        return {"shape": "", "text": values_text(array, decimals)}
    shape = "scalar" if array.ndim == 0 else shape_text(array.shape)
    if array.size > max_values:
        return {"shape": shape, "text": summary_text(array)}
    return {"shape": shape, "text": values_text(array, decimals)}


def _rows(node, grad, arrived=1, parts=1):
    """The box's gradient lines for a total of `arrived` of its `parts` (viz.graph's own lines, with the count
    for a sum), unindented: the page centres each row on its box."""
    word = "grad" if parts == 1 else f"grad ({arrived} of {parts} parts):"
    return [row.strip() for row in grad_rows(node, grad, word)]


def gradient_states(steps):
    """What each box says about its gradient as backward goes: {node: [[view, lines, complete]]}, one entry
    each time a part of its gradient arrives (view 0 is step 1; a box with no entry yet says NOT_YET).

    The loss has its gradient from the start. Every other node's total is summed part by part as the
    engine sums it (the first part, then total + part), so the last entry is the gradient backward leaves.
    """
    parts = _parts(steps)
    root = steps.root
    first = steps[0].grad if len(steps) else steps.leaves[0].grad
    states = {id(root): [[0, _rows(root, first), True]]}
    for view, inp, total, arrived in _running_totals(steps):
        x = id(inp.tensor)
        states.setdefault(x, []).append([view, _rows(inp.tensor, total, arrived, parts[x]), arrived == parts[x]])
    return states


def _parts(steps):
    """{node: how many parts its gradient is the sum of}, by id."""
    parts = {id(leaf.tensor): leaf.contributions for leaf in steps.leaves}
    parts.update({id(s.output): s.contributions for s in steps})
    return parts


def _running_totals(steps):
    """Each part as it arrives, in the engine's order: (view, the InputGrad, the total so far, parts so far)."""
    totals, arrived = {}, {}
    for view, s in enumerate(steps):
        for inp in s.inputs:
            if inp.grad is None:
                continue
            x = id(inp.tensor)
            if x in totals:
                totals[x] = totals[x] + inp.grad
            else:  # Tensor.backward keeps the first part as it is; Value.backward adds it to 0.0 (−0.0 becomes 0.0)
                totals[x] = 0.0 + inp.grad if isinstance(inp.tensor, Value) else inp.grad
            arrived[x] = arrived.get(x, 0) + 1
            yield view, inp, totals[x], arrived[x]


def part_shares(steps):
    """{id(InputGrad): its share ⟨part, total⟩/‖total‖² of the gradient it is a part of, as text} (viz/flow.py's
    share; the parts of one sum written alike, by shares_text)."""
    totals, parts = {}, {}
    for _, inp, total, _ in _running_totals(steps):
        totals[id(inp.tensor)] = total
        parts.setdefault(id(inp.tensor), []).append(inp)
    texts = {}
    for x, inps in parts.items():
        texts.update(zip(map(id, inps), shares_text([share(inp.grad, totals[x]) for inp in inps])))
    return texts


def page_steps(steps, max_values=16, decimals=6, states=None):
    """A trace (viz.trace.trace) as the page's data: one dict per step, node keys as the SVG names them, and
    `grads`, each box's gradient text as it arrives (`states`, gradient_states(steps) unless given)."""
    if not hasattr(steps, "leaves"):
        raise TypeError(f"trace page: expected a trace, viz.trace.trace(loss), got {type(steps).__name__}")
    tkey, okey = node_keys(walk_of(steps.root))
    states = gradient_states(steps) if states is None else states
    shares = part_shares(steps)
    parts = _parts(steps)
    arrived = {}
    data = []
    for s in steps:
        inputs = []
        for inp in s.inputs:
            entry = {"key": tkey[id(inp.tensor)], "label": inp.label, "d": grad_of(inp.label), "role": inp.role}
            if inp.grad is None:
                entry["reason"] = inp.reason
            else:
                entry["grad"] = _array(inp.grad, max_values, decimals)
                arrived[id(inp.tensor)] = arrived.get(id(inp.tensor), 0) + 1
                entry["part"] = [arrived[id(inp.tensor)], parts[id(inp.tensor)]]
                entry["share"] = shares[id(inp)]
                if inp.returned_shape is not None:  # the op returned a broadcast shape; the engine summed it back
                    entry["broadcast"] = shape_text(inp.returned_shape)
            inputs.append(entry)
        data.append({
            "number": s.number, "name": s.name, "scope": s.scope, "rule": s.rule, "op": okey[id(s.output)],
            "output": tkey[id(s.output)], "output_label": s.output_label,
            "output_d": grad_of(s.output_label), "contributions": s.contributions,
            "grad": _array(s.grad, max_values, decimals), "inputs": inputs,
            "saved": [{"name": name, **_array(a, max_values, decimals)} for name, a in s.saved],
        })
    leaves = [{"label": leaf.label, "key": tkey[id(leaf.tensor)], "grad": _array(leaf.grad, max_values, decimals),
               "contributions": leaf.contributions} for leaf in steps.leaves]
    grads = {tkey[node]: {"lines": max(len(lines) for _, lines, _ in entries), "states": entries}
             for node, entries in states.items()}
    return {"loss": steps.root_label, "steps": data, "leaves": leaves, "grads": grads, "not_yet": NOT_YET}


def _widest(states):
    """node -> the lines its box must have room for: line by line, the longest text it will show."""
    def widest(node):
        texts = [[NOT_YET]] + [lines for _, lines, _ in states.get(id(node), ())]
        return [max((t[i] for t in texts if i < len(t)), key=len) for i in range(max(map(len, texts)))]
    return widest


def write_page(steps, path, title, max_values=16, decimals=6, start=1):
    """Write the page for a trace (viz.trace.trace(loss), the loss's graph still there) to `path`; it opens
    at step `start` (1 to the number of steps, or one more for the leaves' view)."""
    if not (isinstance(start, int) and 1 <= start <= len(steps) + 1):
        raise ValueError(f"write_page: start must be a step from 1 to {len(steps)}, or {len(steps) + 1} for the "
                         f"leaves' view, got {start!r}")
    if shutil.which("dot") is None:
        raise RuntimeError(f"the trace page shows the graph's picture, which needs Graphviz's `dot`: {INSTALL_DOT}")
    states = gradient_states(steps)  # the page's data and the picture's room both read them
    data = page_steps(steps, max_values, decimals, states)
    data["start"] = start
    # each box drawn with room for the widest gradient text it will show; the script writes each step's over it
    svg = draw(steps.root, grads=_widest(states)).pipe(format="svg").decode("utf-8")
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG goes inline (the title sits above it)
    fill = {"title": html.escape(title), "svg": svg,
            "data": json.dumps(data, ensure_ascii=False).replace("</", "<\\/")}
    # one pass: a name holding "{{data}}" lands in the title and the SVG, and must not be filled in there
    page = re.sub(r"\{\{(title|svg|data)\}\}", lambda m: fill[m.group(1)], PAGE)
    with atomic_path(path) as tmp:  # all or nothing: never a half-written page
        tmp.write_text(page, encoding="utf-8")


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{title}}</title>
<style>
  body { margin: 0; font: 14px/1.4 Helvetica, Arial, sans-serif; color: #1f1f1f; display: flex; height: 100vh; }
  #picture { flex: 1 1 60%; min-width: 0; display: flex; flex-direction: column; border-right: 1px solid #ccc; }
  #caption { padding: 8px 12px; border-bottom: 1px solid #eee; }
  #graph { flex: 1 1 auto; overflow: auto; background: #fafafa; }
  /* room around the picture, so that a box at its edge can still be scrolled well inside the pane */
  #sheet { width: max-content; padding: 64px; background: #fff; }
  #graph svg { display: block; }
  #panel { flex: 1 1 40%; overflow: auto; padding: 12px 16px; }
  #controls { position: sticky; top: 0; background: #fff; padding-bottom: 8px; border-bottom: 1px solid #eee; }
  button { font-size: 14px; padding: 4px 12px; margin-right: 6px; }
  h2 { font-size: 18px; margin: 8px 0 4px; }
  h3 { font-size: 13px; margin: 12px 0 2px; color: #3b5b92; text-transform: uppercase; letter-spacing: .04em; }
  /* a row wider than the panel scrolls inside its own block, rather than running past the panel's edge */
  pre { margin: 2px 0 6px; padding: 6px 8px; background: #f3f5f9; border-radius: 4px; font-size: 12px;
        overflow-x: auto; }
  /* a dotted name (transformer.h.0.attn.c_attn.weight) has nowhere to break: break it anywhere, inside the panel */
  .label { font-weight: bold; overflow-wrap: anywhere; }
  .muted { color: #666; }
  /* a node with a tooltip nests its shape in <g><a>: select any descendant shape */
  g.node.current path, g.node.current polygon { stroke: #d62728; stroke-width: 5px; }
  g.node.incoming path, g.node.incoming polygon { stroke: #9c27b0; stroke-width: 5px; }
  g.node.outgoing path, g.node.outgoing polygon { stroke: #2e7d32; stroke-width: 5px; }
  g.edge.active > path { stroke: #d62728; stroke-width: 2.5px; }
  g.edge.active > polygon { stroke: #d62728; fill: #d62728; }
  text.grad-none { fill: #9e9e9e; }
  text.grad-partial { fill: #b35c00; font-style: italic; }
  text.grad-complete { fill: #1f3c6e; }
  .key { display: inline-block; width: 12px; height: 12px; border: 3px solid; margin: 0 4px -3px 10px; }
</style>
</head>
<body>
<div id="picture">
  <div id="caption">{{title}}</div>
  <div id="graph"><div id="sheet">{{svg}}</div></div>
</div>
<div id="panel">
  <div id="controls">
    <button id="first" title="Home">first</button><button id="prev" title="←">◀ back</button><button id="next" title="→">forward ▶</button><button id="last" title="End">last</button>
    <span id="position"></span>
    <div class="muted">← → step, Home/End jump.
      <span class="key" style="border-color:#d62728"></span>op
      <span class="key" style="border-color:#9c27b0"></span>g comes from
      <span class="key" style="border-color:#2e7d32"></span>gradients go to</div>
    <div class="muted">Boxes show the gradients known so far: <i>grad —</i> not reached yet,
      <i style="color:#b35c00">grad (k of n parts)</i> a sum still arriving.</div>
  </div>
  <div id="step"></div>
</div>
<script id="trace-data" type="application/json">{{data}}</script>
<script>
"use strict";
const trace = JSON.parse(document.getElementById("trace-data").textContent);
const total = trace.steps.length + 1;  // views: the steps, then the leaves' gradients
let current = 0;
const nodes = {}, edges = {};
for (const g of document.querySelectorAll("#graph g.node")) nodes[g.querySelector("title").textContent] = g;
// x*x draws two arrows op->x with one title: keep them all, so that a step lights both
for (const g of document.querySelectorAll("#graph g.edge")) (edges[g.querySelector("title").textContent] ||= []).push(g);

// A box's gradient is its last lines of text, drawn wide enough for the widest text it will hold; they are
// rewritten at every step, centred on the box (dot placed them left-aligned for the text it was given).
const gradTexts = {};
for (const [key, grad] of Object.entries(trace.grads)) {
  if (!nodes[key]) continue;
  const texts = [...nodes[key].querySelectorAll("text")].slice(-grad.lines);
  const shape = nodes[key].querySelector("polygon, path").getBBox();
  for (const t of texts) { t.setAttribute("text-anchor", "middle"); t.setAttribute("x", shape.x + shape.width / 2); }
  gradTexts[key] = texts;
}
function showGradients(view) {
  for (const [key, grad] of Object.entries(trace.grads)) {
    if (!gradTexts[key]) continue;
    let state = null;  // the last part that has arrived by this view
    for (const s of grad.states) { if (s[0] > view) break; state = s; }
    const lines = state ? state[1] : [trace.not_yet];
    const cls = state ? (state[2] ? "grad-complete" : "grad-partial") : "grad-none";
    gradTexts[key].forEach((t, i) => { t.textContent = lines[i] || ""; t.setAttribute("class", cls); });
  }
}

// Scroll so that the op lies inside the pane with a margin, with the boxes it is joined to (its output, its
// inputs, its data) inside too wherever they fit, moving as little as that takes: the picture stays put while
// the steps stay near each other. Where they do not all fit, the boxes receiving its gradients do, if they
// fit; where not even those fit, the op goes to the middle, with as much around it as can be. The leaves' view
// does the same for its first leaf, with the other leaves in place of the boxes joined to it.
function extent(op, near, margin) {
  return [Math.min(op[0] - margin, near[0] - 8), Math.max(op[1] + margin, near[1] + 8)];
}
function span(scroll, size, op, near, margin) {
  const [lo, hi] = extent(op, near, margin);
  if (hi - lo <= size) return Math.max(hi - size, Math.min(scroll, lo));
  return (op[0] + op[1] - size) / 2;
}
const joined = {};  // node -> the nodes an arrow joins it to
for (const title of Object.keys(edges)) {
  const [a, b] = title.split("->");
  (joined[a] = joined[a] || []).push(b);
  (joined[b] = joined[b] || []).push(a);
}
function keepInView(opKey, receivers, neighbours = joined[opKey] || []) {
  const pane = document.getElementById("graph"), box = pane.getBoundingClientRect();
  const rect = key => {
    const r = nodes[key].getBoundingClientRect();
    return {x: [r.left - box.left + pane.scrollLeft, r.right - box.left + pane.scrollLeft],
            y: [r.top - box.top + pane.scrollTop, r.bottom - box.top + pane.scrollTop]};
  };
  const op = rect(opKey);
  const around = keys => {
    const near = {x: [...op.x], y: [...op.y]};
    for (const key of keys) {
      if (!nodes[key]) continue;
      const r = rect(key);
      for (const a of ["x", "y"]) {
        near[a][0] = Math.min(near[a][0], r[a][0]);
        near[a][1] = Math.max(near[a][1], r[a][1]);
      }
    }
    return near;
  };
  const w = pane.clientWidth, h = pane.clientHeight;
  const mx = Math.max(24, Math.min(64, 0.1 * w)), my = Math.max(24, Math.min(64, 0.1 * h));
  const fits = near => [[op.x, near.x, mx, w], [op.y, near.y, my, h]].every(
    ([o, n, margin, size]) => { const [lo, hi] = extent(o, n, margin); return hi - lo <= size; });
  const all = around(neighbours), received = around(receivers);
  const near = fits(all) ? all : received;
  pane.scrollLeft = span(pane.scrollLeft, w, op.x, near.x, mx);
  pane.scrollTop = span(pane.scrollTop, h, op.y, near.y, my);
}

function esc(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}
function block(label, array) {
  return `<div><span class="label">${esc(label)}</span> <span class="muted">${esc(array.shape)}</span>` +
         `<pre>${esc(array.text)}</pre></div>`;
}
function mark(key, cls) { if (nodes[key]) nodes[key].classList.add(cls); }

function show(i) {
  current = Math.max(0, Math.min(total - 1, i));
  history.replaceState(null, "", `#step=${current + 1}`);  // the address opens this view again
  for (const g of document.querySelectorAll("#graph .current, #graph .incoming, #graph .outgoing, #graph .active"))
    g.classList.remove("current", "incoming", "outgoing", "active");
  showGradients(current);
  // numbered as the text trace numbers them: the leaves' view comes after the last step, it is not one
  document.getElementById("position").textContent = current < trace.steps.length
    ? `step ${current + 1} of ${trace.steps.length}` : `after all ${trace.steps.length} steps: the leaves`;
  const panel = document.getElementById("step");
  if (current === trace.steps.length) {
    panel.innerHTML = `<h2>Leaves: what backward adds into .grad</h2>` +
      trace.leaves.map(l => {
        mark(l.key, "outgoing");
        const summed = l.contributions > 1 ? ` (sum of ${l.contributions} contributions)` : "";
        return block(`${l.label}.grad${summed}`, l.grad);
      }).join("");
    const leaves = trace.leaves.map(l => l.key).filter(key => nodes[key]);
    if (leaves.length) keepInView(leaves[0], leaves, leaves);
    return;
  }
  const s = trace.steps[current];
  mark(s.op, "current"); mark(s.output, "incoming");
  for (const g of edges[`${s.output}->${s.op}`] || []) g.classList.add("active");
  let out = "";
  for (const inp of s.inputs) {
    const notes = [inp.role, inp.broadcast ? `summed from ${inp.broadcast} over broadcast axes` : "",
      inp.part && inp.part[1] > 1
        ? `part ${inp.part[0]} of ${inp.part[1]} of its sum, share ${inp.share} of the total` : ""];
    const name = inp.d + (notes.some(Boolean) ? ` (${notes.filter(Boolean).join(", ")})` : "");
    if (inp.grad) { mark(inp.key, "outgoing"); out += block(name, inp.grad); }
    else out += `<div class="muted">${esc(inp.label)}: ${esc(inp.reason)}</div>`;
    for (const g of edges[`${s.op}->${inp.key}`] || []) g.classList.add("active");
  }
  const summed = s.contributions > 1 ? ` (sum of ${s.contributions} contributions)` : "";
  panel.innerHTML =
    `<h2 id="op-name">${esc(s.name)}</h2><div class="muted">${s.scope ? "in " + esc(s.scope) : "&nbsp;"}</div>` +
    `<h3>incoming gradient</h3>` + block(`g = ${s.output_d}${summed}`, s.grad) +
    `<h3>rule</h3><pre id="rule">${esc(s.rule)}</pre>` +
    (s.saved.length ? `<h3>saved forward values it uses</h3>` + s.saved.map(v => block(v.name, v)).join("") : "") +
    `<h3>outgoing gradients</h3>` + out;
  if (nodes[s.op]) keepInView(s.op, s.inputs.filter(inp => inp.grad).map(inp => inp.key));
}
function fromAddress() {  // #step=N, as show() writes it; otherwise the step the page was written to open at
  const m = /^#step=(\\d+)$/.exec(location.hash);
  return (m ? Number(m[1]) : trace.start) - 1;
}
document.getElementById("first").onclick = () => show(0);
document.getElementById("prev").onclick = () => show(current - 1);
document.getElementById("next").onclick = () => show(current + 1);
document.getElementById("last").onclick = () => show(total - 1);
document.addEventListener("keydown", e => {
  if (e.altKey || e.ctrlKey || e.metaKey) return;  // Alt+← is the browser's back, Ctrl+End its own: leave them be
  const to = {ArrowRight: current + 1, ArrowLeft: current - 1, Home: 0, End: total - 1}[e.key];
  if (to !== undefined) { e.preventDefault(); show(to); }
});
window.addEventListener("hashchange", () => show(fromAddress()));
window.addEventListener("resize", () => show(current));
show(fromAddress());
</script>
</body>
</html>
"""
