"""The @tool decorator, the registry, and the run_tool activity's idempotency record."""

from __future__ import annotations

import pytest
from temporalio.testing import ActivityEnvironment

from activities.tools.idempotency import IdempotencyLedger
from activities.record.redaction import Redactor
from activities.tools.runner import ToolActivities
from activities.tools.registry import ToolRegistry, tool, tool_context
from checkpoint_bridge.stores import FileObjectStore
from workflows.vocabulary.contracts import ToolRequest, ToolSpec
from workflows.vocabulary.errors import ToolRegistryError
from workflows.vocabulary.tool_calls import canonical_arguments, idempotency_key

executions: list[str] = []


@tool(side_effects=True, cache_ignore=("request_id",))
async def charge(customer: str, cents: int, tags: set[str] = frozenset(), request_id: str = "") -> str:
    """Charge a customer.

    More text that is not part of the description."""
    executions.append(tool_context().idempotency_key or "")
    return f"charged {customer} {cents}"


def test_schema_comes_from_type_hints():
    spec = charge.spec
    assert spec.description == "Charge a customer."
    assert spec.side_effects and spec.cache_ignore == ["request_id"]
    params = spec.parameters
    assert params["required"] == ["customer", "cents"]
    assert params["properties"]["cents"]["type"] == "integer"
    assert params["properties"]["tags"]["uniqueItems"] is True
    assert params["additionalProperties"] is False


def test_validation_rejects_bad_and_unknown_arguments():
    assert charge.validate({"customer": "a", "cents": "5"})["cents"] == 5
    for bad in ({"customer": "a"}, {"customer": "a", "cents": "x"}, {"customer": "a", "cents": 1, "extra": 1}):
        with pytest.raises(Exception):
            charge.validate(bad)


def test_bad_tool_definitions_are_refused_with_the_fix():
    with pytest.raises(ToolRegistryError, match="async"):
        tool(lambda x: x)
    with pytest.raises(ToolRegistryError, match="type hint"):
        @tool
        async def untyped(x):  # type: ignore[no-untyped-def]
            return x
    with pytest.raises(ToolRegistryError, match="cannot import tool module"):
        ToolRegistry.from_modules(["no_such_module_here"])
    with pytest.raises(ToolRegistryError, match="defines no @tool"):
        ToolRegistry.from_modules(["json"])

    @tool(name="charge")
    async def other(customer: str) -> str:
        return customer

    with pytest.raises(ToolRegistryError, match="two different tools"):
        ToolRegistry([charge, other])


def test_canonical_arguments_sort_sets_and_drop_volatile_fields():
    spec: ToolSpec = charge.spec
    a = canonical_arguments({"customer": "a", "cents": 1, "tags": ["y", "x"], "request_id": "r1"}, spec)
    b = canonical_arguments({"tags": ["x", "y"], "cents": 1, "customer": "a", "request_id": "r2"}, spec)
    assert a == b and "request_id" not in a


def test_idempotency_keys_are_stable_and_distinct():
    key = idempotency_key("wf", "main", 3, "call_1")
    assert key == idempotency_key("wf", "main", 3, "call_1")
    others = {idempotency_key("wf", "main", 3, "call_2"), idempotency_key("wf", "main", 4, "call_1"),
              idempotency_key("wf", "b", 3, "call_1"), idempotency_key("wf2", "main", 3, "call_1")}
    assert key not in others and len(others) == 4


async def test_recorded_side_effect_is_not_executed_again(tmp_path):
    """A retry that finds the call's idempotency record returns it without running the tool."""
    executions.clear()
    activities = ToolActivities(ToolRegistry([charge]), IdempotencyLedger(FileObjectStore(tmp_path)), Redactor())
    request = ToolRequest(run_id="r", branch_id="main", step=1, tool_call_id="c1", tool_name="charge",
                          arguments={"customer": "acme", "cents": 500}, idempotency_key=idempotency_key("r", "main", 1, "c1"))
    env = ActivityEnvironment()
    first = await env.run(activities.run_tool, request)
    second = await env.run(activities.run_tool, request)
    assert first.output == second.output == "charged acme 500"
    assert not first.replayed_from_record and second.replayed_from_record
    assert executions == [request.idempotency_key]
    other = request.model_copy(update={"tool_call_id": "c2", "idempotency_key": idempotency_key("r", "main", 1, "c2")})
    await env.run(activities.run_tool, other)
    assert len(executions) == 2


async def test_invalid_arguments_never_reach_the_tool(tmp_path):
    executions.clear()
    activities = ToolActivities(ToolRegistry([charge]), IdempotencyLedger(FileObjectStore(tmp_path)), Redactor())
    request = ToolRequest(run_id="r", branch_id="main", step=1, tool_call_id="c1", tool_name="charge",
                          arguments={"customer": "acme", "cents": "lots"}, idempotency_key="idem-" + "0" * 40)
    outcome = await ActivityEnvironment().run(activities.run_tool, request)
    assert outcome.error_kind == "invalid_arguments" and "cents" in outcome.error
    assert executions == []


@tool
async def long_page(n: int) -> str:
    """Read-only: a long page."""
    return f"page {n} " + "word " * 200


@tool(side_effects=True)
async def long_receipt(n: int) -> str:
    """Side-effecting: a long receipt."""
    return f"receipt {n} " + "line " * 200


async def test_large_read_only_outputs_go_by_reference_and_side_effects_stay_inline(tmp_path):
    from checkpoint_bridge.checkpoints.outputs import OutputStore

    outputs = OutputStore(FileObjectStore(tmp_path / "payloads"))
    activities = ToolActivities(ToolRegistry([long_page, long_receipt, charge]), IdempotencyLedger(FileObjectStore(tmp_path)),
                                Redactor(), outputs=outputs)
    env = ActivityEnvironment()

    def request(name: str, **args: object) -> ToolRequest:
        return ToolRequest(run_id="r", branch_id="main", step=1, tool_call_id="c1", tool_name=name, arguments=args,
                           idempotency_key=idempotency_key("r", "main", 1, name))

    page = await env.run(activities.run_tool, request("long_page", n=1))
    assert page.output is None and page.output_ref
    assert await OutputStore(FileObjectStore(tmp_path / "payloads")).get(page.output_ref) == f"page 1 " + "word " * 200
    receipt = await env.run(activities.run_tool, request("long_receipt", n=1))  # compensation reads it from history
    assert receipt.output_ref is None and receipt.output.startswith("receipt 1 ")
    small = await env.run(activities.run_tool, request("charge", customer="a", cents=1))
    assert small.output_ref is None and small.output == "charged a 1"
