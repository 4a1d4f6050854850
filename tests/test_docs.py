"""The front door and the pages behind it: every `python -m` command they show parses, every relative link and
anchor resolves, every picture is what `python -m docs.make` draws now, and what the commands make is ignored."""
import ast
import inspect
import json
import pkgutil
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# `python -m` commands the pages show that are not this project's command lines
FOREIGN = {"pytest", "venv", "pip"}


def text_of(page):
    """A page's Markdown without its HTML comments (notes for whoever writes the page next), continuations joined."""
    return re.sub(r"<!--.*?-->", "", page.read_text(encoding="utf-8"), flags=re.S).replace("\\\n", " ")


def commands():
    """{(module, (its --options…)): the pages that show it}, from code blocks and inline code alike."""
    found = {}
    for page in PAGES:
        for module, rest in re.findall(r"python -m ([\w.]+)((?:[ \t]+(?!#)[^\s`|]+)*)", text_of(page)):
            if module.split(".")[0] in FOREIGN:
                continue
            flags = tuple(sorted({word.split("=")[0] for word in rest.split() if word.startswith("--")}))
            found.setdefault((module, flags), set()).add(page.name)
    return found


@lru_cache(maxsize=None)
def help_of(module):
    run = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, f"python -m {module} --help: {run.stderr[-2000:]}"
    return run.stdout


def test_the_pages_show_the_commands_of_the_project():
    modules = {module for module, _ in commands()}
    assert {"models.train", "models.sample", "models.prepare", "models.eval", "models.export_merged", "viz.graph",
            "viz.trace", "models.troubleshoot", "docs.make"} <= modules


@pytest.mark.parametrize("module", sorted({module for module, _ in commands()}))
def test_every_command_shown_parses_with_the_options_it_is_shown_with(module):
    shown = help_of(module)
    for (name, flags), pages in commands().items():
        if name == module:
            unknown = [flag for flag in flags if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", shown)]
            assert not unknown, f"{sorted(pages)} show python -m {module} with {unknown}, which it does not take"


def test_every_import_the_pages_python_shows_imports():
    """A page's example fails at its first line if a name moved (docs/jacobian_diverge_flow.md once imported
    models.data, which the house's move had made models.training.data): each block's imports, run."""
    imports = sorted({line for page in PAGES for block in re.findall(r"```python\n(.*?)```", text_of(page), re.S)
                      for line in block.splitlines() if re.match(r"(import|from \S+ import) ", line)})
    assert len(imports) > 5
    run = subprocess.run([sys.executable, "-c", "\n".join(imports)], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page):
    return {slug(h) for h in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.M)}


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", text_of(page)):
            if re.match(r"[a-z]+:", target):
                continue  # https://…, mailto:
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_the_readme_stays_a_front_door():
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_the_pictures_are_what_docs_make_draws_now():
    """The graphs are redrawn and compared by their sources' digests; the other pictures (PNGs, runs) are checked
    to be there and made by the command the record names, not redrawn: each takes seconds to minutes."""
    pytest.importorskip("graphviz")
    from docs import make

    record = json.loads(make.RECORD.read_text())
    for picture in make.GRAPHS:
        assert (make.DOCS / picture).is_file(), picture
        assert record[picture]["dot_digest"] == make.digest(make.graph(picture).source), \
            f"docs/{picture} is older than what `{record[picture]['command']}` draws: run python -m docs.make"
    for picture, (command, _) in make.RUNS.items():
        assert (make.DOCS / picture).is_file() and record[picture]["command"] == " ".join(command), picture
    for picture, command in make.COMMANDS.items():
        assert (make.DOCS / picture).is_file() and record[picture]["command"] == " ".join(command), picture
    for picture in make.PLANTED:
        assert (make.DOCS / picture).is_file() and picture in record, picture
    shown = {Path(p).name for page in PAGES for p in re.findall(r"\]\(([\w./-]+\.(?:svg|png))\)", text_of(page))}
    drawn = set(make.GRAPHS) | set(make.RUNS) | set(make.COMMANDS) | set(make.PLANTED)
    assert shown <= drawn, f"pictures docs.make does not draw: {shown - drawn}"


def made_paths():
    """The paths the pages' commands write, relative to where they run (the repository's root)."""
    # the defaults of the main job, viz.graph (--double and --flow too), moons, newton, viz.jacobian and viz.diverge
    paths = {"out", "graph_bigram.svg", "graph_tiny.png", "graph_bigram_double.svg", "flow_tiny.svg", "moons.png",
             "newton.png", "jacobian_softmax.png", "diverge_tiny.svg"}
    for page in PAGES:
        text = text_of(page)
        paths |= set(re.findall(r"--(?:out-dir|out|html|local-dir) ([\w./-]+)", text))
        paths |= set(re.findall(r"save_pretrained\(['\"]([\w./-]+)['\"]\)", text))
        paths |= set(re.findall(r"models\.export_merged [\w./-]+ ([\w./-]+)", text))
    return sorted({p.rstrip("/") for p in paths if not p.startswith(("/", "PATH", "DIR"))})


def test_gitignore_covers_what_the_commands_make():
    if subprocess.run(["git", "rev-parse"], cwd=REPO, capture_output=True).returncode:
        pytest.skip("not a git checkout")
    for path in made_paths():
        as_made = path if Path(path).suffix else path + "/"  # a folder (out/, merged/) unless it has a file's suffix
        run = subprocess.run(["git", "check-ignore", "-q", "--no-index", as_made], cwd=REPO)
        assert run.returncode == 0, f"{path}, which a command in the docs writes, is not in .gitignore"



def run_module(*argv):
    run = subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"python -m {' '.join(argv)}: {run.stderr[-2000:]}"
    return run.stdout


def words(text):
    return " ".join(text.split())


# (a command, the page that quotes what it prints, the figures as the page quotes them, the lines they come from as
# the command prints them, spaces aside): the page must still quote them and the command still print them
QUOTED = [
    (["models.bigram"], "lessons.md", ["loss 2.7320 → 0.6557, bound 0.6530"],
     ["step 0 loss 2.7320", "step 500 loss 0.6557", "counting lower bound 0.6530"]),
    (["models.tiny"], "lessons.md", ["p(你) = 0.084807, loss 2.467373", "∂L/∂E[你] = (−0.915189, 0.915189)"],
     ["p(你) = 0.084807", "L = −log p(你) = 2.467373", "∂L/∂E[你] -0.915189 0.915189"]),
    (["models.gpt2_params"], "gpt2.md", ["124,439,808 for GPT-2 small"], ["total 124,439,808"]),
    (["models.tokenizer"], "lessons.md", ["44 → 13 tokens"],
     ["start: 44 tokens", "机器 + 人 → 机器人 (count 2; 13 tokens)"]),
    (["models.newton", "--out", "/dev/null"], "higher_order.md",
     ["passes gradient descent's 500-step loss after 15 steps"],
     ["Newton-CG is below descent's final loss from step 15"]),
    (["viz.diverge", "models.tiny", "--a", "fused", "--b", "composed", "--format", "dot", "--out", "/dev/null"],
     "jacobian_diverge_flow.md", ["agree to the bit at all 23 ops"], ["the runs agree to the bit at all 23 ops"]),
]


@pytest.mark.parametrize("argv, page, shown, printed", QUOTED, ids=[" ".join(q[0][:2]) for q in QUOTED])
def test_the_figures_a_page_quotes_are_what_the_command_prints(argv, page, shown, printed):
    text = words(text_of(REPO / "docs" / page))
    for figure in shown:
        assert figure in text, f"docs/{page} no longer quotes {figure!r}: update QUOTED with the page"
    out = words(run_module(*argv))
    for line in printed:
        assert line in out, f"python -m {' '.join(argv)} no longer prints {line!r}, which docs/{page} quotes"


def test_the_engine_page_shows_each_mode_as_the_decorator_it_is():
    """docs/engine.md said `@ag.detect_anomaly()` needs the call, where ModeDecorator has made every mode a decorator
    without it too: each mode the page names works bare, and the page shows it bare."""
    import autograd as ag

    # each mode: whether it is on, and a mode outside it where it is off
    modes = {"no_grad": (lambda: not ag.is_grad_enabled(), ag.enable_grad),
             "enable_grad": (ag.is_grad_enabled, ag.no_grad),
             "detect_anomaly": (ag.is_anomaly_enabled, ag.enable_grad)}
    text = text_of(REPO / "docs" / "engine.md")
    named = re.search(r"Modes: (.*?) are context managers and decorators", text, re.S)
    assert named, "docs/engine.md no longer lists the modes that are context managers and decorators"
    assert set(re.findall(r"`ag\.(\w+)\(\)`", named.group(1))) == set(modes)
    for name, (on, outside) in modes.items():
        with outside():
            assert not on() and getattr(ag, name)(on)(), f"@ag.{name} without the call does not enter the mode"
        assert f"`@ag.{name}`" in text, f"docs/engine.md does not show @ag.{name} without the call, which works"


def test_the_gpu_page_counts_the_launches_of_a_decode_step(monkeypatch):
    """docs/gpu.md once said 77 launches a step for GPT-2 small; the step makes 7 per block and 5 more (89)."""
    import autograd as ag
    from models.gpt import decode
    from models.gpt2 import GPT, GPTConfig

    found = re.search(r"one step of (\d+) fixed\s+launches for GPT-2 small, (\d+) per block and (\d+) around",
                      text_of(REPO / "docs" / "gpu.md"))
    assert found, "docs/gpu.md no longer says how many launches a decode step makes"
    total, per_block, around = map(int, found.groups())

    class Counting:
        def __init__(self, kernels):
            self.kernels, self.calls = kernels, 0

        def __getattr__(self, name):
            kernel = getattr(self.kernels, name)

            def launch(*args):
                self.calls += 1
                return kernel(*args)
            return launch

    steps = []
    launches = decode.StaticDecoder._launches

    def counted(self):
        real = self.kernels
        self.kernels = counting = Counting(real)
        try:
            launches(self)
        finally:
            self.kernels = real
        steps.append(counting.calls)

    monkeypatch.setenv("GPT_DECODE", "static")  # the same launches, on the CPU through their NumPy twins
    monkeypatch.setattr(decode.StaticDecoder, "_launches", counted)
    with ag.seeded(0):  # GPT-2 small's 12 blocks, at a width the CPU runs in a moment
        model = GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=12, n_head=2, n_embd=16))
    model.generate([[1, 2, 3]], 4, temperature=0)
    assert steps and set(steps) == {total} == {12 * per_block + around}


def code_blocks(page):
    """A page's fenced code blocks, each as its list of lines."""
    blocks, block = [], None
    for line in text_of(page).splitlines():
        if line.startswith("```"):
            if block is None:
                block = []
            else:
                blocks.append(block)
                block = None
        elif block is not None:
            block.append(line)
    return blocks


def transcript(page, command):
    """The lines a page shows under `$ command` in a code block, up to the next `$ ` line or the block's end."""
    for lines in code_blocks(REPO / "docs" / page):
        if f"$ {command}" in lines:
            after = lines[lines.index(f"$ {command}") + 1:]
            end = next((i for i, line in enumerate(after) if line.startswith("$ ")), len(after))
            return after[:end]
    raise AssertionError(f"docs/{page} shows no `$ {command}`")


def steady(line):
    """A log line without what varies from machine to machine: an iteration's time and rates, the measured peak."""
    if " ms, " in line:
        return line.split(" ms, ")[0].rsplit(", ", 1)[0]
    return line.split("; peak ")[0]


@pytest.mark.parametrize("picture, command, out_dir", [
    ("anomaly_graph.svg", "python -m models.train --lr 100 --detect-anomaly --out-dir out-nan", "out-nan"),
    ("health.png", "python -m models.train --health-interval 50", "out"),
])
def test_the_debugging_pages_transcripts_are_what_docs_make_recorded(picture, command, out_dir):
    """The page quotes the runs whose pictures it shows: every line it quotes is one the run printed
    (docs/pictures.json, written by python -m docs.make), the out-dir as the page names it."""
    from docs import make

    printed = [steady(line.replace("out/", f"{out_dir}/"))
               for line in json.loads(make.RECORD.read_text())[picture]["printed"]]
    shown = [line for line in transcript("debugging.md", command) if line != "…"]
    assert len(shown) > 2
    for line in shown:
        assert steady(line) in printed, f"docs/debugging.md: {line!r} is not what the run of {picture} printed"


def test_the_training_pages_prepare_line_is_what_prepare_prints(tmp_path):
    """Its counts and shards, not its speed: the page's run had other work on the cores."""
    command = "python -m models.prepare models/corpus --out data/shakespeare --tokenizer char"
    shown = transcript("training.md", command)[0]
    out = tmp_path / "shakespeare"
    printed = run_module("models.prepare", "models/corpus", "--out", str(out), "--tokenizer", "char")
    printed = printed.strip().replace(str(out), "data/shakespeare")
    assert shown.rsplit("; ", 1)[0] == printed.rsplit("; ", 1)[0]


# (page, the signature as the page writes it, up to its opening parenthesis; where the code defines it): the page
# must show that signature's parameters, in order, each with the code's default where it shows one
SIGNATURES = [
    ("engine.md", "Tensor(", "autograd.Tensor"),
    ("engine.md", "backward(", "autograd.Tensor.backward"),
    ("engine.md", "Module.to(", "nn.Module.to"),
    ("gpt2.md", "GPTConfig(", "models.gpt2.GPTConfig"),
    ("higher_order.md", "ag.grad(", "autograd.grad"),
    ("jacobian_diverge_flow.md", "viz.jacobian.draw(", "viz.jacobian.draw"),
]


def shown_parameters(page, opening):
    """[(name, default as written or None)] of the longest `opening…)` on the page that writes a default (the
    signature, not a call such as ag.grad(loss, x, create_graph=True))."""
    shown = re.findall(re.escape(opening) + r"([^()`]*=[^()`]*)\)", text_of(REPO / "docs" / page))
    assert shown, f"docs/{page} no longer shows {opening}…) with its defaults: update SIGNATURES with the page"
    parts = max(shown, key=lambda inside: inside.count(",")).split(",")
    return [(name.strip(), default.strip() if sep else None)
            for name, sep, default in (part.partition("=") for part in parts)]


def defined(path):
    """[(name, default or None)] of what `path` (a dotted name) defines, self left out."""
    return [(p.name, None if p.default is p.empty else p.default)
            for p in inspect.signature(pkgutil.resolve_name(path)).parameters.values() if p.name != "self"]


@pytest.mark.parametrize("page, opening, path", SIGNATURES, ids=[s[2] for s in SIGNATURES])
def test_the_signatures_a_page_shows_are_the_codes(page, opening, path):
    """docs/engine.md showed backward(grad=None, retain_graph=False) where the code has retain_graph=None (it
    defaults to create_graph) and a create_graph parameter."""
    real = defined(path)
    shown = shown_parameters(page, opening)
    names = [name for name, _ in real]
    assert [name for name, _ in shown] == names[:len(shown)], f"docs/{page} shows {opening}…) with {shown}: {names}"
    for (name, written), (_, default) in zip(shown, real):
        if written is not None:
            value = ast.literal_eval(written)
            assert type(value) is type(default) and value == default, \
                f"docs/{page} shows {opening}{name}={written}), the code's default is {default!r}"


def test_what_the_texts_say_ag_jacobian_runs_is_what_it_runs():
    """ag.jacobian walks backward once per output and writes no .grad (tests/autograd/test_gradcheck.py); the softmax
    lesson (its docstring and what `python -m models.softmax` prints) and its notebook still said one backward() per
    output, which would."""
    packages = ("autograd", "nn", "models", "viz")
    sources = (path for package in packages for path in sorted((REPO / package).rglob("*.py")))
    texts = [*PAGES, *sorted(REPO.glob("notebooks/*.ipynb")), *sources]
    said = [f"{path.relative_to(REPO)}:{text[:found.start()].count(chr(10)) + 1}"
            for path in texts for text in [path.read_text(encoding="utf-8")]
            for found in re.finditer(r"backward\(\) per output", text)]
    assert not said, f"these say ag.jacobian calls backward() per output, which writes .grad: {said}"
