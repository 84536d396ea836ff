"""A plain `pip install -e .` (the README's first command, no extras) is enough to import Rewind:
every third-party module the product imports at the top of a module comes from a distribution its
core dependencies bring. The suite's own venv has every extra installed, so an import of a library
that only an extra (or another library's dependency that changed) brings would pass every other
test and still stop `rewind demo` for a new user."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ["activities", "checkpoint_bridge", "rewind", "workflows"]
OWN = {*PRODUCT, "worker"}


def core_closure(project: str = "rewind-agents") -> set[str]:
    """The distributions a plain install of `project` brings: its requirements without extras,
    theirs, and the extras a requirement names (`temporalio[aioboto3]`), by canonical name."""
    seen: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [(project, frozenset())]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        key = (canonicalize_name(name), extras)
        if key in done:
            continue
        done.add(key)
        seen.add(key[0])
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue  # a dependency not installed here: a plain install would bring it, nothing imports it
        for raw in requires:
            requirement = Requirement(raw)
            wanted = [""] + sorted(extras)
            if requirement.marker is not None and not any(
                    requirement.marker.evaluate({"extra": extra}) for extra in wanted):
                continue
            todo.append((requirement.name, frozenset(requirement.extras)))
    return seen


def top_level_imports(path: Path) -> set[str]:
    """The top-level names a module imports at its top (not in a function, not under try)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_product_imports_only_what_a_plain_install_brings() -> None:
    closure = core_closure()
    providers = metadata.packages_distributions()
    files = [ROOT / "worker.py", *(p for package in PRODUCT for p in sorted((ROOT / package).rglob("*.py")))]
    missing: dict[str, list[str]] = {}
    for path in files:
        for name in top_level_imports(path) - OWN - set(sys.stdlib_module_names) - {"__future__"}:
            dists = {canonicalize_name(d) for d in providers.get(name, [])}
            if not dists & closure:
                missing.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert not missing, (
        "imported at module level but not brought by `pip install -e .` (add it to [project] dependencies, "
        f"or import it where the extra that brings it is used): {missing}")


def test_the_closure_is_the_core_not_the_extras() -> None:
    closure = core_closure()
    assert {"temporalio", "openai", "aioboto3", "starlette"} <= closure
    assert "pytest" not in closure and "langgraph" not in closure  # extras only
