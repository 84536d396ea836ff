"""The annotation policy table (activities/tools/mcp/policy.py), overrides first, and the
mapping of tools/call results onto tool outputs (activities/tools/mcp/results.py)."""

from __future__ import annotations

import base64

import pytest
from mcp.types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from activities.tools.mcp.compensation import TemplateError, fill
from activities.tools.mcp.config import Compensation, ToolOverride
from activities.tools.mcp.policy import decide
from activities.tools.mcp.results import tool_output
from checkpoint_bridge.checkpoints.outputs import OutputStore
from checkpoint_bridge.stores.folder import FileObjectStore
from workflows.vocabulary.errors import ConfigError, ToolError


def _decide(annotations, override=None, approve=False, properties=("path",)):
    return decide("fs__t", annotations, override, approve_destructive=approve, properties=list(properties))


@pytest.mark.parametrize("annotations, approve, label, why", [
    ({"readOnlyHint": True}, True, "read-only", "readOnlyHint true"),
    ({}, False, "side effect, sent once", "no readOnlyHint (the MCP default: false)"),
    ({}, True, "side effect, sent once, approval", "no destructiveHint (the MCP default: true) and the worker runs "
                                                    "with --approve-destructive"),
    ({"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True}, True, "side effect, idempotent",
     "no approval: destructiveHint false"),
    ({"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}, False, "side effect, sent once",
     "without --approve-destructive"),
])
def test_the_table(annotations, approve, label, why) -> None:
    policy = _decide(annotations, approve=approve)
    assert policy.label == label
    assert any(why in line for line in policy.reasons), policy.reasons


def test_overrides_win_and_say_so() -> None:
    policy = _decide({"readOnlyHint": True}, ToolOverride(side_effects=True, idempotent=True, needs_approval=True,
                                                          on_repeat="ask", effect_key=("path",), timeout_s=5.0))
    assert policy.label == "side effect, idempotent, approval"
    assert policy.options == {"on_repeat": "ask", "effect_key": ["path"], "timeout_s": 5.0}
    assert "read-only" not in policy.label and any("override side_effects true (over readOnlyHint true)" in r
                                                   for r in policy.reasons)
    quiet = _decide({}, ToolOverride(needs_approval=False), approve=True)
    assert not quiet.needs_approval and any("override needs_approval false" in r for r in quiet.reasons)


def test_contradictory_overrides_name_their_key() -> None:
    with pytest.raises(ConfigError, match=r"^f.json: k.needs_approval: fs__t is read-only"):
        _decide({"readOnlyHint": True}, ToolOverride(needs_approval=True, where="f.json: k"))
    with pytest.raises(ConfigError, match=r"^f.json: k.effect_key: 'nope' is not an argument of fs__t \(it has path\)"):
        _decide({}, ToolOverride(effect_key=("nope",), where="f.json: k"))


def test_a_compensation_is_for_side_effects_and_names_their_arguments() -> None:
    undo = Compensation(tool="move_file", arguments={"source": "{arguments.path}"})
    policy = _decide({}, ToolOverride(compensate=undo))
    assert policy.compensate == undo
    assert "compensated on rollback --compensate by fs__move_file (override)" in policy.reasons
    with pytest.raises(ConfigError, match=r"^f.json: k.compensate: fs__t is read-only, so there is nothing to undo"):
        _decide({"readOnlyHint": True}, ToolOverride(compensate=undo, where="f.json: k"))
    wrong = Compensation(tool="move_file", arguments={"source": "{arguments.file.name}"})
    with pytest.raises(ConfigError, match=r"^f.json: k.compensate.arguments: \{arguments.file\} is not an argument "
                                          r"of fs__t \(it has path\)"):
        _decide({}, ToolOverride(compensate=wrong, where="f.json: k"))


def test_compensation_arguments_are_filled_from_the_call() -> None:
    template = {"path": "{arguments.path}", "n": "{arguments.n}", "to": "{arguments.path}.old {{kept}}",
                "edits": [{"oldText": "{arguments.edits.0.newText}", "newText": "{arguments.edits.0.oldText}"}],
                "said": "{output.id}", "all": "{arguments.edits}", "fixed": 3}
    call = {"path": "/a", "n": 2, "edits": [{"oldText": "x", "newText": "y"}]}
    assert fill(template, call, {"id": 7}) == {
        "path": "/a", "n": 2, "to": "/a.old {kept}", "edits": [{"oldText": "y", "newText": "x"}], "said": 7,
        "all": [{"oldText": "x", "newText": "y"}], "fixed": 3}
    with pytest.raises(TemplateError, match=r"\{arguments.edits.1.newText\} names nothing in the call being undone "
                                            r"\(arguments.edits has no '1'\)") as caught:
        fill({"edits": ["{arguments.edits.1.newText}"]}, call, None)
    assert caught.value.where == ".edits.0"


async def test_results(tmp_path) -> None:
    text = CallToolResult(content=[TextContent(type="text", text="a"), TextContent(type="text", text="b")])
    assert await tool_output(text, "s__t", None) == "a\nb"
    structured = CallToolResult(content=[TextContent(type="text", text='{"n": 1}')], structured_content={"n": 1})
    assert await tool_output(structured, "s__t", None) == {"n": 1}
    with pytest.raises(ToolError, match="^no such file$"):
        await tool_output(CallToolResult(content=[TextContent(type="text", text="no such file")], is_error=True),
                          "s__t", None)

    outputs = OutputStore(FileObjectStore(tmp_path))
    data = base64.b64encode(b"\x89PNG....").decode()
    mixed = CallToolResult(content=[
        TextContent(type="text", text="see"), ImageContent(type="image", data=data, mime_type="image/png"),
        ResourceLink(type="resource_link", uri="file:///a.txt", name="a.txt", mime_type="text/plain"),
        EmbeddedResource(type="resource", resource=TextResourceContents(uri="file:///b.txt", text="bee")),
    ])
    out = await tool_output(mixed, "s__t", outputs)
    (image,) = out["attachments"]
    ref = image["ref"]
    assert image == {"type": "image", "mimeType": "image/png", "bytes": 8, "ref": ref,
                     "description": f"[image, image/png, 8 bytes, stored in the payload store as {ref[:12]}]"}
    assert await OutputStore(FileObjectStore(tmp_path)).get(ref) == {"type": "image", "mimeType": "image/png",
                                                                    "data": data}
    assert out["text"].splitlines() == ["see", "[resource link file:///a.txt a.txt (text/plain)]",
                                        "[resource file:///b.txt]", "bee", image["description"]]
