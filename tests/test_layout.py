"""The package reads as its architecture: layers that import only downward, no import circle,
every module in docs/package.md's map. (The docstrings' module lists, `__all__` and the configs'
help are checked in test_homework.py.)"""
import ast
from pathlib import Path


import minirl

ROOT = Path(minirl.__file__).resolve().parent
LAYERS = ["core", "lm", "world", "exact", "train", "course"]  # each imports only from itself and those before it
MODULES = sorted(f"{p.parent.name}.{p.stem}" for layer in LAYERS for p in (ROOT / layer).glob("*.py")
                 if p.stem not in ("__init__", "__main__"))


def imports_of(module: str) -> set[str]:
    """'layer.module' names a module imports from minirl, anywhere in its body (lazy imports too)."""
    layer, _ = module.split(".")
    tree = ast.parse((ROOT / layer / f"{module.split('.')[1]}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                parts = (node.module or "").split(".")
                if parts[0] != "minirl":
                    continue
                base = parts[1:]
            else:
                base = ([] if node.level == 2 else [layer]) + (node.module.split(".") if node.module else [])
            if len(base) >= 2:
                found.add(".".join(base[:2]))
            elif len(base) == 1:  # from ..core import ops, validate / from . import grammar
                found |= {f"{base[0]}.{a.name}" for a in node.names if f"{base[0]}.{a.name}" in MODULES}
        elif isinstance(node, ast.Import):
            found |= {".".join(a.name.split(".")[1:3]) for a in node.names if a.name.startswith("minirl.")}
    return found - {module}


GRAPH = {m: imports_of(m) for m in MODULES}


def test_every_module_is_in_a_layer_and_the_root_holds_only_the_package():
    assert sorted(p.name for p in ROOT.glob("*.py")) == ["__init__.py"]
    assert {d.name for d in ROOT.iterdir() if d.is_dir() and d.name != "__pycache__"} == set(LAYERS)
    assert len(MODULES) >= 40


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) where the imported module sits in a later layer."""
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    return sorted((m, n) for m, deps in graph.items() for n in deps if rank[n.split(".")[0]] > rank[m.split(".")[0]])


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports, found by depth-first search for a back edge, or None."""
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                return stack[stack.index(n):] + [n]
            if n not in state and (circle := visit(n)):
                return circle
        stack.pop()
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state and (circle := visit(m)):
            return circle
    return None


def test_nothing_imports_upward():
    assert not upward_imports(GRAPH), f"imports from a later layer (layers, in order: {LAYERS}): {upward_imports(GRAPH)}"


def test_no_import_circle():
    circle = find_circle(GRAPH)
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_the_checks_find_a_planted_upward_import_and_a_planted_circle():
    """The old circle (rlhf and sft importing each other) and an op importing a trainer, planted."""
    circled = dict(GRAPH, **{"train.rlhf": GRAPH["train.rlhf"] | {"train.sft"},
                             "train.sft": GRAPH["train.sft"] | {"train.rlhf"}})
    assert find_circle(circled) is not None and set(find_circle(circled)) == {"train.rlhf", "train.sft"}
    assert upward_imports(dict(GRAPH, **{"core.ops": {"train.sft"}})) == [("core.ops", "train.sft")]


def test_every_module_is_in_the_docs_map():
    package_map = (ROOT.parent / "docs" / "package.md").read_text()
    missing = [f"minirl/{m.replace('.', '/')}.py" for m in MODULES if f"minirl/{m.replace('.', '/')}.py" not in package_map]
    assert not missing, f"docs/package.md's map misses {missing}"
