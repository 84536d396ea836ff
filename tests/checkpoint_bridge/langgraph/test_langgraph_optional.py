"""LangGraph is an optional extra: without it installed, the product imports and its
CLI runs; only the saver module needs it, and says how to install it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# Runs in a fresh interpreter in which LangGraph and LangChain cannot be imported,
# as on an installation without the `langgraph` extra.
PROGRAM = textwrap.dedent("""
    import importlib, pkgutil, sys

    class NoLangGraph:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"langgraph", "langchain_core", "langsmith", "ormsgpack"}:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
            return None

    sys.meta_path.insert(0, NoLangGraph())
    import rewind, rewind.cli.main, rewind.worker.main, worker
    names = []
    for package in ("workflows", "activities", "checkpoint_bridge", "rewind"):
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, prefix=f"{package}."):
            name = info.name
            if name == "checkpoint_bridge.langgraph.saver":
                continue
            importlib.import_module(name)
            names.append(name)
    assert not any(m.split(".")[0] in {"langgraph", "langchain_core"} for m in sys.modules), "imported LangGraph"
    print(len(names), "modules")
    rewind.cli.main.build_parser().parse_args(["tree", "some-run"])
    try:
        import checkpoint_bridge.langgraph.saver
    except ImportError as exc:
        print("saver:", exc)
""")


def test_the_product_imports_without_langgraph_and_the_saver_says_what_to_install() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert int(lines[0].split()[0]) > 50, lines
    assert lines[-1].startswith("saver: RewindSaver needs LangGraph's checkpoint library"), lines
    assert "pip install 'rewind-agents[langgraph]'" in lines[-1]
