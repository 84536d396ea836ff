"""The layering, written down: imports point down only, and no module imports
itself back through others. Read from the source with `ast` (every import,
function-level ones too, tests/import_graph.py), so nothing has to run.

    worker.py            the worker's entry point
    rewind/ examples/    CLI, worker, client API, facade; the demo's tools  (top)
    activities/          what runs in an activity
    checkpoint_bridge/   documents, stores, projection, branches
    workflows/           vocabulary and the loop                      (bottom)

Inside each package the same holds between its rooms
(ROOMS below, each package's docstring says it in words): a room imports
only rooms on lower floors, never one on its own floor.
"""

from __future__ import annotations

import import_graph
from import_graph import REPO, graph, imports_of, rooms, strongly_connected

# examples/ sits with rewind/: its research tools are what `rewind demo` runs.
LAYERS = {"workflows": 0, "checkpoint_bridge": 1, "activities": 2, "rewind": 3, "examples": 3, "worker": 4}

# The floors of each package's rooms (a room is a module directly in the package or a
# sub-package); a room not named here is a module of the package's top level, on
# TOP_LEVEL's floor.
ROOMS = {
    "workflows": {
        "": 0,                               # the package's docstring: its floors
        "vocabulary": 0,                     # contracts, wire names, errors, ids, canonical JSON, status
        "loop": 1,                           # AgentWorkflow and a step's pieces
        "graph": 2, "experiment": 2,         # a LangGraph graph's run | experiments and scores
        "pipeline": 3,                       # PipelineWorkflow: the user's code (and a graph's) as a run
    },
    "activities": {
        "": 0,                               # the package's docstring: its floors
        "liveness": 0,                       # heartbeats, the hand-over of a dead worker's run
        "record": 1,                         # checkpoint writes, the mirror, redaction, spans
        "model": 2, "tools": 2,              # the model call | @tool, the registry, tool activities, MCP
        "code": 3,                           # @pipeline, graphs and LangChain tools, experiments
    },
    "checkpoint_bridge": {
        "document": 0, "stores": 0,          # the document model | the object stores
        "checkpoints": 1,                    # the checkpoint store: chains, packs, lineage, outputs, erasure
        "projection": 2, "temporal": 2,      # history -> checkpoints | the Temporal side of runs
        "branches": 3,                       # fork, rollback, compensation, decisions from outside
        "events": 3,                         # a run's event stream: buses, replay from the store, readers
        "views": 4, "langgraph": 4,          # what people see | LangGraph's checkpointer on the store
    },
    "rewind": {
        "": 0,                               # the facade (rewind/__init__.py): names as strings, loaded on use
        "settings": 0,                       # the one place that reads the environment
        "temporal": 1,                       # reaching Temporal: connection, converter, dev server, tracing
        # TOP_LEVEL (2): the client API: client, stores, experiments, erasure, progress, variables
        "worker": 3,                         # the worker process: build, run, pool, health, offline model
        "local": 4,                          # the local stack: stack, dev, demo, servers for tests
        "serve": 4,                          # `rewind serve`: the HTTP face, its event streams, the live page
        "cli": 5,                            # the command line: parser, commands, reference
    },
}
TOP_LEVEL = 2


def _layer(module: str) -> int:
    return LAYERS[module.split(".")[0]]


def _floor(package: str, room: str) -> int:
    name = room[len(package) + 1:] if room != package else ""
    return ROOMS[package].get(name, TOP_LEVEL if name else ROOMS[package][""])


def _top_level_module(package: str, room: str) -> bool:
    return room != package and (REPO / package / f"{room[len(package) + 1:]}.py").exists()


def test_imports_point_down_only():
    up = sorted(f"{m} -> {d}" for m, deps in graph().items() for d in deps if _layer(d) > _layer(m))
    assert up == [], "imports that point up a layer:\n" + "\n".join(up)


def test_rooms_point_down_only():
    wrong = []
    for package in ROOMS:
        for room, deps in rooms(package).items():
            if not _top_level_module(package, room) and room != package:
                assert room[len(package) + 1:] in ROOMS[package], f"{room}/ is a new room: give it a floor in ROOMS"
            for dep in deps:
                same_top_level = _top_level_module(package, room) and _top_level_module(package, dep)
                if _floor(package, dep) >= _floor(package, room) and not same_top_level:
                    wrong.append(f"{room} -> {dep}")
    assert sorted(wrong) == [], "imports between rooms that point up or sideways:\n" + "\n".join(sorted(wrong))


def test_the_figures_of_the_rooms():
    # What `python tests/import_graph.py` prints: no arrow runs back up, no circle of rooms or modules.
    for package in ROOMS:
        figures = import_graph.figures(package)
        assert (figures["back up"], figures["circles"], figures["module circles"]) == ([], [], []), figures


def test_the_ground_floor_imports_nothing_else_of_the_project():
    bottom = sorted(f"{m} -> {d}" for m, deps in graph().items() if m.startswith("workflows")
                    for d in deps if not d.startswith("workflows"))
    assert bottom == [], bottom


def test_no_import_cycles():
    cycles = strongly_connected(graph())
    assert cycles == [], f"import cycles: {cycles}"


def test_the_checker_sees_an_upward_import():
    # The parser resolves relative and function-level imports: a sample that points up is caught.
    sample = REPO / "tests" / "layer_sample.py"
    sample.write_text("def f():\n    from rewind.cli.main import main\n    from . import errors\n")
    try:
        found = imports_of("workflows.sample", sample)
    finally:
        sample.unlink()
    assert "rewind.cli.main" in found and "workflows.errors" in found


def test_the_checker_sees_rooms_in_a_circle():
    # Two rooms that import each other are one circle and one arrow back up.
    sample = {"p.a": {"p.b"}, "p.b": {"p.a", "p.c"}, "p.c": set()}
    assert strongly_connected(sample) == [["p.a", "p.b"]]
    assert len(import_graph.back_up(sample)) == 1
