"""The front door and the pages behind it: every `python -m` command they show parses, every relative link and
anchor resolves, every picture is what `python -m docs.make` draws now, and what the commands make is ignored."""
import json
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
    paths = {"out", "graph_bigram.svg", "graph_tiny.png", "moons.png"}  # the defaults of the main job, viz.graph, moons
    for page in PAGES:
        text = text_of(page)
        paths |= set(re.findall(r"--(?:out-dir|out|html|local-dir) ([\w./-]+)", text))
        paths |= set(re.findall(r"save_pretrained\('([\w./-]+)'\)", text))
        paths |= set(re.findall(r"models\.export_merged [\w./-]+ ([\w./-]+)", text))
    return sorted({p.rstrip("/") for p in paths if not p.startswith(("/", "PATH", "DIR"))})


def test_gitignore_covers_what_the_commands_make():
    if subprocess.run(["git", "rev-parse"], cwd=REPO, capture_output=True).returncode:
        pytest.skip("not a git checkout")
    for path in made_paths():
        as_made = path if Path(path).suffix else path + "/"  # a folder (out/, merged/) unless it has a file's suffix
        run = subprocess.run(["git", "check-ignore", "-q", "--no-index", as_made], cwd=REPO)
        assert run.returncode == 0, f"{path}, which a command in the docs writes, is not in .gitignore"
