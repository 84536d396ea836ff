"""What `rewind dev`'s banner suggests to try next: the commands that fit what the worker offers
(`rewind dev` runs them as a user would in tests/rewind/local/test_dev_as_user.py and, for a
pipeline, tests/rewind/test_pipelines_as_user.py)."""

from __future__ import annotations

from rewind.local.dev import _next_commands


def test_a_graph_module_gets_graph_commands():
    start, tree, fork, diff, view = _next_commands("127.0.0.1:7233", True, "graph", ["research:agent"])
    assert start.startswith("rewind start --graph research:agent --input '{...}' --model script:graph --wait")
    assert "--set CHANNEL=VALUE" in fork and "--system-prompt" not in fork


def test_a_pipeline_comes_before_a_graph_and_the_agent_loop_is_the_rest():
    start, *_, fork, _, _ = _next_commands("127.0.0.1:7391", False, None, ["research:agent", "report"])
    assert start.startswith("TEMPORAL_ADDRESS=127.0.0.1:7391 rewind start --pipeline report ") and "--prompt" in fork
    start, *_, fork, _, _ = _next_commands("127.0.0.1:7233", True, None, [])
    assert start.startswith('rewind start --task "..."') and "--system-prompt" in fork
