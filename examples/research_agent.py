"""The research agent of the reference design: demo tools.

    rewind worker --tools examples.research_agent

`search_company` stands in for a flaky external search API: it fails 20% of
the time (REWIND_DEMO_FAILURE_RATE) and Temporal retries it. `save_report`
is side-effecting: it writes the report to an outbox file named by the call's
idempotency key, so a retried call (even after a worker crash between the
write and the activity's completion) never writes a second report.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
from pathlib import Path
from typing import Annotated

from pydantic import Field

from rewind import tool, tool_context

DEFAULT_COMPANIES = ["Acme Robotics", "Globex", "Initech", "Umbrella Analytics", "Stark Industries"]
DEFAULT_TASK = "Research these companies and save a competitive report: " + ", ".join(DEFAULT_COMPANIES)
# The research agent's own system prompt (the demo's; a run without one gets a neutral default).
RESEARCH_PROMPT = (
    "You are a careful research agent. Use the tools you are given, cite what they returned, "
    "and finish with a concise answer."
)


def outbox_dir() -> Path:
    # An empty variable is an unset one (rewind/settings/config.py), here too.
    return Path(os.environ.get("REWIND_OUTBOX") or Path(os.environ.get("REWIND_HOME") or ".rewind") / "outbox")


class TransientSearchError(RuntimeError):
    """The demo search API's simulated outage; Temporal retries the call."""


def _profile(company: str) -> dict[str, object]:
    # Deterministic made-up figures: the demo must give the same report every time.
    h = int(hashlib.sha256(company.lower().encode()).hexdigest(), 16)
    stacks = ["Rust + Kubernetes", "Java on-prem", "Python + serverless", "Go microservices", "C++ embedded"]
    return {
        "company": company,
        "founded": 1960 + h % 60,
        "employees": 50 + h % 20000,
        "revenue_musd": round(5 + (h >> 8) % 5000 / 3, 1),
        "growth_pct": round(((h >> 16) % 400) / 10 - 5, 1),
        "tech_stack": stacks[(h >> 24) % len(stacks)],
        "patents": (h >> 32) % 300,
    }


@tool(max_attempts=6, timeout_s=30)
async def search_company(company: Annotated[str, Field(min_length=1, max_length=200)]) -> str:
    """Look up public facts about one company (employees, revenue, growth, technology)."""
    await asyncio.sleep(float(os.environ.get("REWIND_DEMO_SEARCH_LATENCY_S") or "0.05"))
    if random.random() < float(os.environ.get("REWIND_DEMO_FAILURE_RATE") or "0.2"):
        raise TransientSearchError(f"search API timed out for {company!r}")
    return json.dumps(_profile(company), sort_keys=True)


@tool(side_effects=True, timeout_s=30)
async def save_report(
    title: Annotated[str, Field(min_length=1, max_length=300)],
    content: Annotated[str, Field(min_length=1, max_length=200_000)],
) -> str:
    """Save the final report to the outbox; returns where it was saved."""
    key = tool_context().idempotency_key
    assert key is not None  # side-effecting tools always get one
    folder = outbox_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{key}.md"
    body = (content if content.lstrip().startswith("#") else f"# {title}\n\n{content}").encode() + b"\n"
    tmp = folder / f".{key}.{os.getpid()}.tmp"
    tmp.write_bytes(body)
    try:
        # link() is atomic and refuses an existing name: the report appears
        # whole, at most once per idempotency key, whatever crashes when.
        os.link(tmp, path)
    except FileExistsError:
        return f"saved to {path} (already saved by an earlier attempt)"
    finally:
        tmp.unlink(missing_ok=True)
    return f"saved to {path}"
