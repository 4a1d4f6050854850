"""The trace of backward as one self-contained web page: step through it on the graph's picture.

    python -m viz.trace models.tiny --html trace.html

`write_page(steps, path)` takes a trace, `viz.trace.trace(loss)` (this
module reads a trace and never makes one: viz.trace imports it, not the
other way round), and renders the backward graph (Graphviz's `dot`, as
viz.graph draws it) as SVG inside a single HTML file with its own CSS and
script: nothing is fetched from the network. Each step of the trace is one
view: the op being run is highlighted, with the tensor whose gradient comes
in and the inputs it sends gradients to; a side panel shows the incoming
gradient g, the rule with the saved forward values it reads, and every
outgoing gradient, the same numbers `python -m viz.trace` prints. Buttons and
the ← → keys step back and forth (Home and End jump to the ends).
"""
import html
import json
import shutil
from pathlib import Path

from .graph import INSTALL_DOT, draw, node_keys
from .numbers import host, norm, number, shape_text, values_text
from .walk import GraphWalk


def _array(array, max_values, decimals):
    """{shape, text}: the values for a small array, its shape and norm for a large one (as the text trace)."""
    shape = "scalar" if array.ndim == 0 else shape_text(array.shape)
    if array.size > max_values:
        a = host(array)
        return {"shape": shape, "text": f"‖·‖ = {number(norm(a), 6)}, max |·| = {number(float(abs(a).max()), 6)}"
                                        f"  ({array.size} values, not shown)"}
    return {"shape": shape, "text": values_text(array, decimals)}


def page_steps(steps, max_values=16, decimals=6):
    """A trace (viz.trace.trace) as the page's data: one dict per step, node keys as the SVG names them."""
    if not hasattr(steps, "leaves"):
        raise TypeError(f"trace page: expected a trace, viz.trace.trace(loss), got {type(steps).__name__}")
    tkey, okey = node_keys(GraphWalk(steps.root))
    data = []
    for s in steps:
        inputs = []
        for inp in s.inputs:
            entry = {"key": tkey[id(inp.tensor)], "label": inp.label, "role": inp.role}
            if inp.grad is None:
                entry["reason"] = inp.reason
            else:
                entry["grad"] = _array(inp.grad, max_values, decimals)
            inputs.append(entry)
        data.append({
            "number": s.number, "name": s.name, "scope": s.scope, "rule": s.rule, "op": okey[id(s.op)],
            "output": tkey[id(s.output)], "output_label": s.output_label, "contributions": s.contributions,
            "grad": _array(s.grad, max_values, decimals), "inputs": inputs,
            "saved": [{"name": name, **_array(a, max_values, decimals)} for name, a in s.saved],
        })
    leaves = [{"label": leaf.label, "key": tkey[id(leaf.tensor)], "grad": _array(leaf.grad, max_values, decimals)}
              for leaf in steps.leaves]
    return {"loss": steps.root_label, "steps": data, "leaves": leaves}


def write_page(steps, path, title, max_values=16, decimals=6, start=1):
    """Write the page for a trace (viz.trace.trace(loss), the loss's graph still there) to `path`;
    it opens at step `start` (1 is the op that made the loss)."""
    if shutil.which("dot") is None:
        raise RuntimeError(f"the trace page shows the graph's picture, which needs Graphviz's `dot`: {INSTALL_DOT}")
    data = page_steps(steps, max_values, decimals)
    svg = draw(steps.root).pipe(format="svg").decode("utf-8")  # the title sits above the picture, not in it
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG goes inline
    page = PAGE.replace("{{start}}", str(start - 1)).replace("{{title}}", html.escape(title)).replace(
        "{{svg}}", svg).replace("{{data}}", json.dumps(data, ensure_ascii=False).replace("</", "<\\/"))
    path = Path(path)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)  # all or nothing: never a half-written page


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
  #graph svg { display: block; }
  #panel { flex: 1 1 40%; overflow: auto; padding: 12px 16px; }
  #controls { position: sticky; top: 0; background: #fff; padding-bottom: 8px; border-bottom: 1px solid #eee; }
  button { font-size: 14px; padding: 4px 12px; margin-right: 6px; }
  h2 { font-size: 18px; margin: 8px 0 4px; }
  h3 { font-size: 13px; margin: 12px 0 2px; color: #3b5b92; text-transform: uppercase; letter-spacing: .04em; }
  pre { margin: 2px 0 6px; padding: 6px 8px; background: #f3f5f9; border-radius: 4px; font-size: 12px; }
  .label { font-weight: bold; }
  .muted { color: #666; }
  /* a node with a tooltip nests its shape in <g><a>: select any descendant shape */
  g.node.current path, g.node.current polygon { stroke: #d62728; stroke-width: 5px; }
  g.node.incoming path, g.node.incoming polygon { stroke: #9c27b0; stroke-width: 5px; }
  g.node.outgoing path, g.node.outgoing polygon { stroke: #2e7d32; stroke-width: 5px; }
  g.edge.active > path { stroke: #d62728; stroke-width: 2.5px; }
  g.edge.active > polygon { stroke: #d62728; fill: #d62728; }
  .key { display: inline-block; width: 12px; height: 12px; border: 3px solid; margin: 0 4px -3px 10px; }
</style>
</head>
<body>
<div id="picture">
  <div id="caption">{{title}}</div>
  <div id="graph">{{svg}}</div>
</div>
<div id="panel">
  <div id="controls">
    <button id="first" title="Home">first</button><button id="prev" title="←">◀ back</button><button id="next" title="→">forward ▶</button><button id="last" title="End">last</button>
    <span id="position"></span>
    <div class="muted">← → step, Home/End jump.
      <span class="key" style="border-color:#d62728"></span>op
      <span class="key" style="border-color:#9c27b0"></span>g comes from
      <span class="key" style="border-color:#2e7d32"></span>gradients go to</div>
  </div>
  <div id="step"></div>
</div>
<script id="trace-data" type="application/json">{{data}}</script>
<script>
"use strict";
const trace = JSON.parse(document.getElementById("trace-data").textContent);
const total = trace.steps.length + 1;  // the steps, then the leaves' gradients
let current = 0;
const nodes = {}, edges = {};
for (const g of document.querySelectorAll("#graph g.node")) nodes[g.querySelector("title").textContent] = g;
for (const g of document.querySelectorAll("#graph g.edge")) edges[g.querySelector("title").textContent] = g;

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
  for (const g of document.querySelectorAll("#graph .current, #graph .incoming, #graph .outgoing, #graph .active"))
    g.classList.remove("current", "incoming", "outgoing", "active");
  document.getElementById("position").textContent = `step ${current + 1} of ${total}`;
  const panel = document.getElementById("step");
  if (current === trace.steps.length) {
    panel.innerHTML = `<h2>Leaves: what backward adds into .grad</h2>` +
      trace.leaves.map(l => { mark(l.key, "outgoing"); return block(`${l.label}.grad`, l.grad); }).join("");
    return;
  }
  const s = trace.steps[current];
  mark(s.op, "current"); mark(s.output, "incoming");
  if (edges[`${s.output}->${s.op}`]) edges[`${s.output}->${s.op}`].classList.add("active");
  let out = "";
  for (const inp of s.inputs) {
    const name = `∂L/∂${inp.label}` + (inp.role ? ` (${inp.role})` : "");
    if (inp.grad) { mark(inp.key, "outgoing"); out += block(name, inp.grad); }
    else out += `<div class="muted">${esc(inp.label)}: ${esc(inp.reason)}</div>`;
    if (edges[`${s.op}->${inp.key}`]) edges[`${s.op}->${inp.key}`].classList.add("active");
  }
  const summed = s.contributions > 1 ? ` (sum of ${s.contributions} contributions)` : "";
  panel.innerHTML =
    `<h2 id="op-name">${esc(s.name)}</h2><div class="muted">${s.scope ? "in " + esc(s.scope) : "&nbsp;"}</div>` +
    `<h3>incoming gradient</h3>` + block(`g = ∂L/∂${s.output_label}${summed}`, s.grad) +
    `<h3>rule</h3><pre id="rule">${esc(s.rule)}</pre>` +
    (s.saved.length ? `<h3>saved forward values it uses</h3>` + s.saved.map(v => block(v.name, v)).join("") : "") +
    `<h3>outgoing gradients</h3>` + out;
  // the op mid-height, its inputs below it in view; sideways only as far as it takes (centring pushed the legend off)
  if (nodes[s.op]) nodes[s.op].scrollIntoView({block: "center", inline: "nearest"});
}
document.getElementById("first").onclick = () => show(0);
document.getElementById("prev").onclick = () => show(current - 1);
document.getElementById("next").onclick = () => show(current + 1);
document.getElementById("last").onclick = () => show(total - 1);
document.addEventListener("keydown", e => {
  const to = {ArrowRight: current + 1, ArrowLeft: current - 1, Home: 0, End: total - 1}[e.key];
  if (to !== undefined) { e.preventDefault(); show(to); }
});
show({{start}});
</script>
</body>
</html>
"""
