"""The house's arrows: autograd → nn → models, viz beside; nothing imports upward, and autograd has no cycle.

Every import counts, at the top of a file or inside a function: a lazy import
is an arrow all the same. models reaches viz's pictures only through the entry
point viz registers (pyproject.toml), never by an import.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# what each layer may import of the project; viz reads autograd's graph and the shared helpers of models
MAY_IMPORT = {"autograd": {"autograd"}, "nn": {"autograd", "nn"}, "models": {"autograd", "nn", "models"},
              "viz": {"autograd", "nn", "models", "viz"}}


def module_of(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path):
    """The project modules `path` imports, as dotted names (relative imports resolved)."""
    here = module_of(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in MAY_IMPORT}


def sources(layer):
    return sorted((ROOT / layer).rglob("*.py"))


def test_nothing_imports_upward():
    upward = [(module_of(path), name) for layer, allowed in MAY_IMPORT.items() for path in sources(layer)
              for name in imports(path) if name.split(".")[0] not in allowed]
    assert upward == []


def test_autograd_has_no_import_cycle():
    modules = {module_of(path): path for path in sources("autograd")}
    graph = {name: {m for m in imports(path) if m in modules and m != name} for name, path in modules.items()}
    graph = {name: {m for m in targets if not name.startswith(m + ".")} for name, targets in graph.items()}
    # a package's __init__ that a submodule imports is an arrow like any other; a submodule importing its own
    # package for a sibling (from . import x) resolves to the sibling, which `imports` lists too
    state = {}

    def visit(name, trail):
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                raise AssertionError(" → ".join(trail[trail.index(target):] + [target]) if target in trail
                                     else f"{name} → {target}")
            if target not in state:
                visit(target, trail + [target])
        state[name] = "done"
    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_the_arrows_read_are_real():
    """The parse finds the arrows that exist, so the tests above cannot pass by reading nothing."""
    assert "autograd.backend" in imports(ROOT / "autograd" / "tensor.py")
    assert "autograd.kernels" in imports(ROOT / "autograd" / "ops.py")
    assert "autograd.kernels.runtime" in imports(ROOT / "models" / "gpt" / "bpe_kernels.py")
    assert "models.numbers" in imports(ROOT / "viz" / "numbers.py")
