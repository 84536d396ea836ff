"""The layering, written down: imports point down only, and no module imports
itself back through others. Read from the source with `ast` (every import,
function-level ones too), so nothing has to run.

    worker.py            the worker's entry point
    rewind/ examples/    CLI, worker, client API, facade; the demo's tools  (top)
    activities/          what runs in an activity
    checkpoint_bridge/   documents, stores, projection, branches
    workflows/           vocabulary and the loop                      (bottom)

Inside checkpoint_bridge/ the same holds between its rooms: views/ and
langgraph/ on top, the checkpoint store, projection and branches in the
middle, document/ and stores/ at the bottom (neither imports the other).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# examples/ sits with rewind/: its research tools are what `rewind demo` runs.
LAYERS = {"workflows": 0, "checkpoint_bridge": 1, "activities": 2, "rewind": 3, "examples": 3, "worker": 4}


def _modules() -> dict[str, Path]:
    found = {"worker": REPO / "worker.py"}
    for package in ("workflows", "checkpoint_bridge", "activities", "rewind", "examples"):
        for path in (REPO / package).rglob("*.py"):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path) -> set[str]:
    """Project modules `name` imports (resolved to the longest known module name)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out.update(t for t in targets if t.split(".")[0] in LAYERS)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        deps = set()
        for target in _imports(name, path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                deps.add(target)
        graph[name] = deps
    return graph


def _layer(module: str) -> int:
    return LAYERS[module.split(".")[0]]


# The rooms of checkpoint_bridge/ (a module directly in it is the middle floor).
BRIDGE_ROOMS = {"document": 0, "stores": 0, "views": 2, "langgraph": 2}


def _room(module: str) -> tuple[str, int]:
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in BRIDGE_ROOMS:
        return parts[1], BRIDGE_ROOMS[parts[1]]
    return "checkpoint_bridge", 1


def test_imports_point_down_only():
    up = sorted(f"{m} -> {d}" for m, deps in _graph().items() for d in deps if _layer(d) > _layer(m))
    assert up == [], "imports that point up a layer:\n" + "\n".join(up)


def test_checkpoint_bridge_rooms_point_down_only():
    bridge = {m: deps for m, deps in _graph().items() if m.startswith("checkpoint_bridge.")}
    wrong = []
    for module, deps in bridge.items():
        room, floor = _room(module)
        for dep in deps:
            if not dep.startswith("checkpoint_bridge.") or dep == "checkpoint_bridge":
                continue
            dep_room, dep_floor = _room(dep)
            if dep_room != room and dep_floor >= floor:
                wrong.append(f"{module} -> {dep}")
    assert sorted(wrong) == [], "imports inside checkpoint_bridge/ that point up or sideways:\n" + "\n".join(sorted(wrong))


def test_the_ground_floor_imports_nothing_else_of_the_project():
    bottom = sorted(f"{m} -> {d}" for m, deps in _graph().items() if m.startswith("workflows")
                    for d in deps if not d.startswith("workflows"))
    assert bottom == [], bottom


def test_no_import_cycles():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == [], f"import cycles: {cycles}"


def test_the_checker_sees_an_upward_import():
    # The parser resolves relative and function-level imports: a sample that points up is caught.
    sample = REPO / "tests" / "layer_sample.py"
    sample.write_text("def f():\n    from rewind.cli import main\n    from . import errors\n")
    try:
        found = _imports("workflows.sample", sample)
    finally:
        sample.unlink()
    assert "rewind.cli" in found and "workflows.errors" in found
