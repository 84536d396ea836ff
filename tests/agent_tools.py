"""Tools used by the test-suite (loaded by workers as module `agent_tools`).

Every execution appends one JSON line to the file named by REWIND_TEST_EVENTS,
so tests can count executions across worker processes, including ones that
were killed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

from activities.tools.arg_types import NotAnOption, RelativePath
from activities.tools.registry import ToolError, tool, tool_context


def _event(kind: str, **fields: object) -> None:
    path = os.environ.get("REWIND_TEST_EVENTS")
    if not path:
        return
    ctx = tool_context()
    line = json.dumps({
        "kind": kind, "at": time.time(), "pid": os.getpid(), "tool_call_id": ctx.tool_call_id,
        "step": ctx.step, "attempt": ctx.attempt, "key": ctx.idempotency_key, "run": ctx.run_id, **fields,
    })
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()


@tool
async def lookup(term: str) -> str:
    """Look a term up (read-only; counts executions)."""
    _event("lookup", term=term)
    return f"definition of {term}"


@tool(fast=True)
async def quick(term: str) -> str:
    """A fast tool (a local activity on the workflow's worker); counts executions."""
    _event("quick", term=term)
    return f"quick answer for {term}"


@tool
async def tagged(tags: set[str]) -> str:
    """Read-only tool whose argument is a set (cache key must not depend on order)."""
    _event("tagged", tags=sorted(tags))
    return ",".join(sorted(tags))


@tool(heartbeat_s=2, timeout_s=120, max_attempts=5)
async def slow(label: str, seconds: float) -> str:
    """Sleep, recording start and end (parallelism and crash tests)."""
    _event("slow_start", label=label)
    await asyncio.sleep(seconds)
    _event("slow_end", label=label)
    return f"{label} done"


@tool(max_attempts=2)
async def always_fails(reason: str = "boom") -> str:
    """A tool with a bug: always raises."""
    _event("always_fails")
    raise RuntimeError(f"deliberate failure: {reason}")


@tool
async def refuses(item: str) -> str:
    """Reports a failure the model should see, without retries."""
    _event("refuses")
    raise ToolError(f"cannot handle {item!r}")


@tool(side_effects=True, heartbeat_s=2, timeout_s=60, max_attempts=5)
async def send_email(to: str, body: str) -> str:
    """Side-effecting: 'sends' an email into an outbox keyed by the idempotency key.

    With REWIND_TEST_CRASH_AFTER_EFFECT set, the first attempt SIGKILLs its own
    worker right after the effect and before the activity can complete.
    """
    ctx = tool_context()
    _event("send_email_attempt", to=to)
    outbox = Path(os.environ["REWIND_TEST_OUTBOX"])
    outbox.mkdir(parents=True, exist_ok=True)
    target = outbox / f"{ctx.idempotency_key}.eml"
    if not target.exists():
        tmp = outbox / f".{ctx.idempotency_key}.{os.getpid()}"
        tmp.write_text(f"To: {to}\n\n{body}\n")
        try:
            os.link(tmp, target)
            _event("send_email_effect", to=to)
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    if os.environ.get("REWIND_TEST_CRASH_AFTER_EFFECT") and ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return f"sent to {to}"


@tool
async def blob(index: int, size: int) -> str:
    """Read-only: `size` characters of deterministic text (long-run tests)."""
    line = f"record {index}: " + "lorem ipsum dolor sit amet " * 4
    return (line * (size // len(line) + 1))[:size]


@send_email.compensation
async def recall_email(arguments: dict, output: object) -> str:
    """Compensation of send_email: recall it (once per compensation key)."""
    ctx = tool_context()
    _event("recall_email", to=arguments.get("to"))
    outbox = Path(os.environ["REWIND_TEST_OUTBOX"])
    outbox.mkdir(parents=True, exist_ok=True)
    (outbox / f"{ctx.idempotency_key}.recall").write_text(f"recall {arguments.get('to')}\n")
    return f"recalled email to {arguments.get('to')}"


@tool(heartbeat_s=2, timeout_s=300, max_attempts=10)
async def gate(name: str) -> str:
    """Wait until the file REWIND_TEST_GATE_DIR/<name> exists (holds runs mid-loop)."""
    _event("gate_wait", name=name)
    path = Path(os.environ["REWIND_TEST_GATE_DIR"]) / name
    while not path.exists():
        await asyncio.sleep(0.05)
    return f"gate {name} open"


@tool(side_effects=True)
async def write_note(path: RelativePath, flag: NotAnOption, body: str) -> str:
    """Write a note file under REWIND_TEST_OUTBOX/notes (validates its arguments first)."""
    _event("write_note", path=path)
    folder = Path(os.environ["REWIND_TEST_OUTBOX"]) / "notes"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / path.replace("/", "_")).write_text(body)
    return f"wrote {path}"


@tool
async def big(megabytes: float) -> str:
    """Read-only: a result of the given size (oversized-output tests)."""
    _event("big", megabytes=megabytes)
    return "z" * int(megabytes * 1_000_000)


@tool
async def odd_text() -> str:
    """Read-only: text with a lone surrogate, as a JSON API can return it."""
    return json.loads('"before \\ud800 after"')


def _remote_effect(key: str, attempt: int, delay: float) -> None:
    """A remote system applying an effect keyed by the idempotency key, after `delay` s."""
    time.sleep(delay)
    outbox = Path(os.environ["REWIND_TEST_OUTBOX"])
    outbox.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(outbox / f"{key}.effect", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        os.write(fd, f"attempt {attempt}".encode())
        os.close(fd)
        applied = True
    except FileExistsError:
        applied = False
    with open(os.environ["REWIND_TEST_EVENTS"], "a") as f:
        f.write(json.dumps({"kind": "remote_effect", "key": key, "attempt": attempt, "applied": applied, "at": time.time()}) + "\n")


@tool(side_effects=True, timeout_s=2, heartbeat_s=30, max_attempts=3)
async def charge_card(cents: int) -> str:
    """Side-effecting call to a slow remote API. Attempt 1 outlives its 2 s timeout (a zombie)."""
    ctx = tool_context()
    _event("charge_attempt", cents=cents)
    delay = 4.0 if ctx.attempt == 1 else 0.1
    # The remote side keeps going even if this attempt is cancelled.
    await asyncio.shield(asyncio.to_thread(_remote_effect, ctx.idempotency_key or "", ctx.attempt, delay))
    return f"charged {cents} (attempt {ctx.attempt})"


# -- approvals and effects of the lineage (tests/workflows/loop/test_approvals.py) ------

def _invoice(kind: str, customer: str, amount_cents: int) -> str:
    ctx = tool_context()
    _event(kind, customer=customer, amount_cents=amount_cents)
    return f"invoice {customer} {amount_cents} sent ({ctx.idempotency_key})"


@tool(side_effects=True, effect_key=("customer", "amount_cents"))
async def send_invoice(customer: str, amount_cents: int, memo: str = "") -> str:
    """Side-effecting; a repeat of an invoice the lineage already sent is reused (the default)."""
    return _invoice("send_invoice", customer, amount_cents)


@tool(side_effects=True, on_repeat="ask")
async def send_invoice_ask(customer: str, amount_cents: int) -> str:
    """Side-effecting; a repeat waits for approval."""
    return _invoice("send_invoice_ask", customer, amount_cents)


@tool(side_effects=True, on_repeat="run")
async def send_invoice_again(customer: str, amount_cents: int) -> str:
    """Side-effecting; a repeat runs again on purpose."""
    return _invoice("send_invoice_again", customer, amount_cents)


@tool(side_effects=True, needs_approval=True)
async def wire_money(to: str, amount_cents: int) -> str:
    """Side-effecting; every call waits for approval."""
    return _invoice("wire_money", to, amount_cents)


@tool(side_effects=True, needs_approval=lambda args: args["amount_cents"] > 10_000)
async def refund(customer: str, amount_cents: int) -> str:
    """Side-effecting; refunds over $100 wait for approval."""
    return _invoice("refund", customer, amount_cents)


@tool(side_effects=True, needs_approval=True, approval_timeout_s=1.5, on_timeout="approve")
async def post_update(text: str) -> str:
    """Side-effecting; approved by itself when nobody decides within 1.5 s."""
    return _invoice("post_update", text, 0)


@tool(side_effects=True, needs_approval=True, approval_timeout_s=1.0)
async def drop_table(name: str) -> str:
    """Side-effecting; rejected by itself when nobody decides within 1 s (the default on_timeout)."""
    return _invoice("drop_table", name, 0)


def answer_length(checkpoint) -> int:  # type: ignore[no-untyped-def]
    """A scorer (`rewind experiment --score agent_tools:answer_length`): the final answer's length."""
    return len(checkpoint.messages[-1].get("content") or "")


# -- sub-agents (tests/workflows/loop/test_subagents.py) ------------------------------------
from pydantic import BaseModel, Field  # noqa: E402

from activities.tools.registry import subagent  # noqa: E402


class LookupArguments(BaseModel):
    term: str = Field(min_length=1)
    limit: int = Field(default=3, ge=1, le=10)


looker = subagent(
    name="looker", description="Look a term up and report what it means.", system_prompt="You look terms up.",
    tools=["lookup"], args=LookupArguments, task_template="Look up {term} (at most {limit} results).",
)

# A chain four deep: the fourth level is one more than the default depth limit allows.
nest_a = subagent(name="nest_a", description="Level a.", system_prompt="You are level a.", tools=["nest_b"])
nest_b = subagent(name="nest_b", description="Level b.", system_prompt="You are level b.", tools=["nest_c"])
nest_c = subagent(name="nest_c", description="Level c.", system_prompt="You are level c.", tools=["nest_d"])
nest_d = subagent(name="nest_d", description="Level d.", system_prompt="You are level d.", tools=["lookup"])


@tool(max_attempts=3)
async def shaky_output(term: str) -> str:
    """Read-only; its first attempt (every attempt for "never") returns a value with no JSON form."""
    _event("shaky_output", term=term)
    if tool_context().attempt == 1 or term == "never":
        return {"value": object()}  # type: ignore[return-value]
    return f"stored {term}"
