"""The project's import graph, read from the source with `ast` (every import,
function-level and TYPE_CHECKING ones too), so nothing has to run.

    python tests/import_graph.py rewind checkpoint_bridge

prints, for each package named, the figures of its top level as rooms: each
module directly in it is a room, each sub-package one room (its inside is
its own business); an arrow is "room A imports something of room B".

    rooms     how many rooms
    arrows    room-to-room arrows
    back up   arrows that run back up: the fewest arrows that would have to
              go for the rooms to stand in floors (found greedily); 0 exactly
              when no rooms import each other round a loop
    circles   loops of rooms (strongly connected groups of more than one)
    module circles  loops of modules anywhere in the package

tests/test_layers.py checks the layering itself with the same graph.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("workflows", "checkpoint_bridge", "activities", "rewind", "examples")


def modules() -> dict[str, Path]:
    """Every module of the project by dotted name (`worker` is the top-level worker.py)."""
    found = {"worker": REPO / "worker.py"}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports_of(name: str, path: Path) -> set[str]:
    """Project names `name` imports (modules, or a package's attributes as `package.attr`)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    roots = set(PACKAGES) | {"worker"}
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
        out.update(t for t in targets if t.split(".")[0] in roots)
    return out


def graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (each import resolved to the longest module name)."""
    found = modules()
    out = {}
    for name, path in found.items():
        deps = set()
        for target in imports_of(name, path):
            while target and target not in found:
                target = target.rpartition(".")[0]
            if target and target != name:
                deps.add(target)
        out[name] = deps
    return out


def strongly_connected(nodes: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in nodes.get(v, ()):
            if w not in nodes:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return sorted(groups)


def room_of(module: str, package: str) -> str | None:
    """The room of `package`'s top level that holds `module` (None when outside it)."""
    if module == package:
        return package  # the package's own __init__.py
    if not module.startswith(package + "."):
        return None
    return package + "." + module[len(package) + 1:].split(".")[0]


def rooms(package: str, modules_graph: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """Room -> the rooms it imports, for `package`'s top level."""
    modules_graph = graph() if modules_graph is None else modules_graph
    out: dict[str, set[str]] = {}
    for module, deps in modules_graph.items():
        room = room_of(module, package)
        if room is None:
            continue
        arrows = out.setdefault(room, set())
        for dep in deps:
            target = room_of(dep, package)
            if target is not None and target != room:
                arrows.add(target)
    return out


def back_up(room_graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Arrows to drop for the rooms to stand in floors: Eades' greedy order (sinks last,
    sources first, else the room with the most arrows out over in), arrows against it."""
    left = {r: set(d) & set(room_graph) for r, d in room_graph.items()}
    head: list[str] = []
    tail: list[str] = []
    while left:
        changed = True
        while changed:
            changed = False
            for r in sorted(left):
                if not left[r]:  # imports nothing left: lowest floor
                    tail.insert(0, r)
                    _remove(left, r)
                    changed = True
            for r in sorted(left):
                if not any(r in d for d in left.values()):  # nothing left imports it: top floor
                    head.append(r)
                    _remove(left, r)
                    changed = True
        if left:
            r = max(sorted(left), key=lambda x: len(left[x]) - sum(x in d for d in left.values()))
            head.append(r)
            _remove(left, r)
    order = {r: i for i, r in enumerate(head + tail)}  # top floor first
    return sorted((a, b) for a, deps in room_graph.items() for b in deps if b in order and order[b] < order[a])


def _remove(left: dict[str, set[str]], room: str) -> None:
    del left[room]
    for deps in left.values():
        deps.discard(room)


def figures(package: str) -> dict[str, object]:
    modules_graph = graph()
    room_graph = rooms(package, modules_graph)
    inside = {m: {d for d in deps if room_of(d, package)} for m, deps in modules_graph.items() if room_of(m, package)}
    return {
        "package": package,
        "rooms": len(room_graph),
        "arrows": sum(len(d) for d in room_graph.values()),
        "back up": back_up(room_graph),
        "circles": strongly_connected(room_graph),
        "module circles": strongly_connected(inside),
    }


def main(argv: list[str]) -> int:
    for package in argv or ["rewind", "checkpoint_bridge"]:
        f = figures(package)
        print(f"{package}/: {f['rooms']} rooms, {f['arrows']} arrows, {len(f['back up'])} running back up, "
              f"{len(f['circles'])} circles of rooms, {len(f['module circles'])} of modules")
        for a, b in f["back up"]:
            print(f"    back up: {a} -> {b}")
        for group in f["circles"] + f["module circles"]:
            print(f"    circle: {' <-> '.join(group)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
