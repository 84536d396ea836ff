"""`rewind view`'s data and page (checkpoint_bridge/views/viewer.py), on every store backend.

The page's data says what each checkpoint adds to its parent; these tests rebuild
every checkpoint from it the way the page's script does and compare with what
`store.load` returns, compare each embedded comparison with what `rewind diff`
computes, and check that nothing from a checkpoint can break out of the data.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

import pytest
from checkpoint_factory import first_step, next_step
from store_backends import Backend

from checkpoint_bridge.views.diff import diff, diff_json
from checkpoint_bridge.document.layout import step_key
from checkpoint_bridge.document.schema import AgentCheckpoint
from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.views.viewer import build_view, render_page
from workflows.vocabulary.errors import (CorruptCheckpointError, InvalidIdError, LineageError, RunNotFoundError,
                             StoreUnavailableError)

RUN = "view-1"
# A tool output that would run script, were it ever put in the page as markup.
EVIL = ('</script><script>document.body.setAttribute("data-pwned", "1")</script>'
        '<img src=x onerror="document.title=\'pwned\'"> & \u2028 <!-- ]]>')
LEDGER = {"step": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150, "cost_usd": 0.0003,
                   "model_calls": 1, "tool_calls": 1, "cache_hits": 0},
          "branch": {"prompt_tokens": 240, "completion_tokens": 60, "total_tokens": 300, "cost_usd": 0.0006,
                     "model_calls": 2, "tool_calls": 2, "cache_hits": 0},
          "total": {"prompt_tokens": 240, "completion_tokens": 60, "total_tokens": 300, "cost_usd": 0.0006,
                    "model_calls": 2, "tool_calls": 2, "cache_hits": 0}}


def _step(parent: AgentCheckpoint, *, branch: str | None = None, output: str | None = None,
          system: str | None = None, **record: Any) -> AgentCheckpoint:
    """`next_step`, with its tool call's output and record fields changed."""
    cp = next_step(parent, branch_id=branch)
    messages, rec = list(cp.messages), cp.tool_call_cache[-1]
    if output is not None:
        messages[-1] = {**messages[-1], "content": output}
        rec = rec.model_copy(update={"tool_output": output})
    if system is not None:  # a fork that changed the system prompt
        messages[0] = {"role": "system", "content": system}
    rec = rec.model_copy(update=record)
    return cp.model_copy(update={"messages": messages, "tool_call_cache": [*cp.tool_call_cache[:-1], rec]})


async def _run(store: CheckpointStore) -> dict[str, AgentCheckpoint]:
    """main 0..4 (rolled back after 2: main.r1 continues), and a fork `tech` from main:2."""
    cps: dict[str, AgentCheckpoint] = {}
    main0 = first_step(RUN)
    main1 = _step(main0).model_copy(update={"ledger": LEDGER})
    main2 = _step(main1, side_effects=True, idempotency_key=f"{RUN}/main/2/call",
                  approval={"verdict": "rejected", "by": "ana", "reason": "not today",
                            "requested_at": "2025-01-01T12:00:02Z", "decided_at": "2025-01-01T12:00:03Z"})
    main3 = _step(main2, output=EVIL)
    main4 = _step(main3, error="the search engine timed out")
    tech3 = _step(main2, branch="tech", system="Be brief.")
    tech4 = _step(tech3, branch="tech", served_from_cache=True)
    r1_3 = _step(main2, branch="main.r1", side_effects=True, idempotency_key=f"{RUN}/main/2/call",
                 reused={"tool_name": "web_search", "idempotency_key": f"{RUN}/main/2/call", "branch_id": "main",
                         "step": 2, "origin": "lineage"})
    for cp in (main0, main1, main2, main3, main4, tech3, tech4, r1_3):
        await store.save(cp)
        cps[cp.checkpoint_id] = cp
    await store.invalidate_after(RUN, "main", 2, "rolled back to step 2")
    return cps


# -- what the page's script does with the data, written again as the oracle -----------------

def _messages(view: dict[str, Any], i: int) -> list[dict[str, Any]]:
    rows = view["checkpoints"]
    chain = []
    while i is not None:
        chain.append(rows[i])
        i = rows[i]["p"]
    messages: list[dict[str, Any]] = []
    for row in reversed(chain):
        kept, added = row["m"]
        messages = messages[:kept]
        for k, m in row.get("mp", []):
            messages[k] = m
        messages += added
    return messages


def _records(view: dict[str, Any], i: int) -> list[dict[str, Any]]:
    rows = view["checkpoints"]
    row = rows[i]
    kept, added = row["t"]
    before = _records(view, row["p"])[:kept] if row["p"] is not None else []
    out = []
    answers = {m.get("tool_call_id"): m["content"] for m in row["m"][1] if m.get("role") == "tool"}
    for r in added:
        r = {"error": None, "tool_call_id": None, "idempotency_key": None, "side_effects": False,
             "served_from_cache": False, "tool_output": None, "duration_ms": 0, **r}
        r.pop("outcome")
        if r.pop("output_in_message", False):
            r["tool_output"] = answers[r["tool_call_id"]]
        out.append(r)
    return before + out


def _variables(view: dict[str, Any], i: int) -> dict[str, Any]:
    rows = view["checkpoints"]
    while "v" not in rows[i]:
        i = rows[i]["p"]
    return rows[i]["v"]


def _expanded(d: dict[str, Any], view: dict[str, Any]) -> dict[str, Any]:
    rows = view["checkpoints"]
    out = dict(d)
    for side in ("a", "b"):
        x = dict(d[side])
        if "steps_at" in x:
            x["steps"] = [{"step_index": rows[i]["s"], "step_label": rows[i]["l"], "status": rows[i]["st"],
                           "checkpoint_id": rows[i]["id"]} for i in x.pop("steps_at")]
        x["tool_calls"] = [{"error": None, "decision": None, "side_effects": False, "served_from_cache": False,
                            "reused": False, "subagent": None, "kept": False, "dry_run": False, **c} for c in x["tool_calls"]]
        out[side] = x
    return out


def _data_of(page: str) -> str:
    found = re.findall(r'<script id="rewind-data" type="application/json">(.*?)</script>', page, re.S)
    assert len(found) == 1
    return found[0]


# -- the tests ------------------------------------------------------------------------------

async def test_every_checkpoint_is_rebuilt_from_what_it_adds(store: CheckpointStore) -> None:
    cps = await _run(store)
    view = await build_view(store, RUN)
    rows = view["checkpoints"]
    assert [r["id"] for r in rows] == [f"{RUN}:main:{s}" for s in range(5)] + [f"{RUN}:main.r1:3", f"{RUN}:tech:3", f"{RUN}:tech:4"]
    assert len(rows) == len(cps)
    for i, row in enumerate(rows):
        loaded = await store.load(row["id"])
        assert _messages(view, i) == loaded.messages, row["id"]
        assert _records(view, i) == [r.model_dump(mode="json") for r in loaded.tool_call_cache], row["id"]
        assert _variables(view, i) == loaded.agent_variables
        assert row["st"] == loaded.status
        assert (row["s"], row["l"], row["tk"], row["usd"]) == (
            loaded.step_index, loaded.step_label, [loaded.llm_tokens_used, loaded.prompt_tokens, loaded.completion_tokens],
            loaded.llm_cost_usd)
    assert [r["st"] for r in rows[3:5]] == ["invalidated", "invalidated"]
    assert [(b["id"], b["kind"], b["origin"], b["invalidated"]) for b in view["branches"]] == [
        ("main", "root", None, 2), ("main.r1", "rollback", "main:2", 0), ("tech", "fork", "main:2", 0)]
    # What each call did, in the words of the worker's metrics; the decision and the reuse kept whole.
    outcome = {r["id"]: [t["outcome"] for t in r["t"][1]] for r in rows}
    assert outcome[f"{RUN}:main:2"] == ["rejected"] and outcome[f"{RUN}:main:4"] == ["error"]
    assert outcome[f"{RUN}:tech:4"] == ["cached"] and outcome[f"{RUN}:main.r1:3"] == ["reused"]
    assert outcome[f"{RUN}:main:1"] == ["ok"]
    assert rows[2]["t"][1][0]["approval"]["reason"] == "not today"
    assert rows[5]["t"][1][0]["reused"]["step"] == 2
    # The ledger without its zeros; a branch scope equal to the total is named, not repeated.
    led = rows[1]["led"]
    assert led["branch"] == "total" and "cache_hits" not in led["step"] and led["step"]["total_tokens"] == 150


async def test_a_fork_shares_its_prefix_instead_of_repeating_it(store: CheckpointStore) -> None:
    cps = await _run(store)
    view = await build_view(store, RUN)
    rows = {r["id"]: r for r in view["checkpoints"]}
    embedded = sum(len(r["m"][1]) + len(r.get("mp", [])) for r in rows.values())
    main_messages = len(cps[f"{RUN}:main:4"].messages)
    own = {cid: len(cp.messages) - len(cps[cp.parent_id].messages) for cid, cp in cps.items()
           if cp.parent_id and not cid.startswith(f"{RUN}:main:")}
    # Every message once: main's conversation, what the other branches added, and the
    # fork's new system prompt as a patch of the prefix it shares.
    assert embedded == main_messages + sum(own.values()) + 1
    tech = rows[f"{RUN}:tech:3"]
    assert tech["m"][0] == len(cps[f"{RUN}:main:2"].messages)
    assert tech["mp"] == [[0, {"role": "system", "content": "Be brief."}]]
    # A record's output is the content of the tool message that answered it: in the page once.
    assert all(t.get("output_in_message") and "tool_output" not in t for r in rows.values() for t in r["t"][1])
    assert "v" in rows[f"{RUN}:main:0"] and all("v" in r for r in rows.values())  # steps_done changes every step


async def test_each_comparison_is_what_rewind_diff_computes(store: CheckpointStore) -> None:
    await _run(store)
    view = await build_view(store, RUN)
    assert [n["name"] for n in view["names"]] == ["main", "tech", "main.r0"]
    assert sorted(view["diffs"]) == ["main..main.r0", "main..tech", "tech..main.r0"]
    for pair, compact in view["diffs"].items():
        a, b = pair.split("..")
        assert _expanded(compact, view) == diff_json(await diff(store, RUN, a, b)), pair
        assert "steps" not in compact["a"]  # rows of checkpoints the page already holds, by reference
    original = _expanded(view["diffs"]["main..main.r0"], view)
    assert [s["status"] for s in original["b"]["steps"]] == ["invalidated", "invalidated"]


async def test_nothing_from_a_checkpoint_can_break_out_of_the_page(store: CheckpointStore) -> None:
    await _run(store)
    view = await build_view(store, RUN)
    page = render_page(view)
    assert EVIL not in page and "data-pwned" not in page.replace('\\"data-pwned\\"', "")
    assert page.count("<script") == 2 and page.count("</script>") == 2  # the data and the page's own code
    assert json.loads(_data_of(page)) == view  # the escapes are JSON's: the data comes back whole
    assert "\u2028" not in _data_of(page)
    # The page runs no script but its own (by hash) and loads nothing from anywhere.
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', page)[1]
    code = re.search(r"<script data-csp>(.*?)</script>", page, re.S)[1]
    digest = base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp.replace("&#x27;", "'")
    assert "default-src 'none'" in csp.replace("&#x27;", "'")
    assert not re.search(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:|//)""", page), "the page refers to the network"
    assert "<link" not in page and "@import" not in page
    # A run id that spells a placeholder stays text.
    other = render_page({**view, "run_id": "x__REWIND_DATA__"})
    assert other.count('<script id="rewind-data"') == 1 and "<title>rewind view: x__REWIND_DATA__</title>" in other


async def test_a_missing_parent_leaves_the_rest_of_the_run_viewable(store: CheckpointStore) -> None:
    await _run(store)
    orphan = next_step(first_step(RUN), branch_id="lost").model_copy(update={"parent_id": f"{RUN}:gone:0"})
    await store.save(orphan)
    view = await build_view(store, RUN)
    row = next(r for r in view["checkpoints"] if r["id"] == orphan.checkpoint_id)
    assert row["p"] is None and row["po"] == f"{RUN}:gone:0" and _messages(view, view["checkpoints"].index(row)) == orphan.messages
    lost = next(n for n in view["names"] if n["name"] == "lost")
    assert "head" not in lost and f"{RUN}:gone:0" in lost["error"] and "rewind mirror" in lost["error"]
    assert not any("lost" in pair for pair in view["diffs"]) and "main..tech" in view["diffs"]


async def test_a_pair_rewind_diff_refuses_is_shown_with_its_reason(store: CheckpointStore) -> None:
    main = [first_step(RUN)]
    for _ in range(3):
        main.append(_step(main[-1]))
    late = _step(main[3], branch="late")  # forked from step 3, which a rollback then invalidated
    for cp in (*main, late):
        await store.save(cp)
    await store.invalidate_after(RUN, "main", 2, "rolled back to step 2")
    view = await build_view(store, RUN)
    with pytest.raises(LineageError) as refused:
        await diff(store, RUN, "main", "late")
    assert view["diffs"]["main..late"] == {"error": str(refused.value)} and "invalidated" in str(refused.value)
    assert [r["st"] for r in view["checkpoints"]] == ["completed"] * 3 + ["invalidated", "completed"]


async def test_bad_input_is_one_clear_error(backend: Backend, store: CheckpointStore) -> None:
    await _run(store)
    with pytest.raises(InvalidIdError, match="run id"):
        await build_view(store, "../etc")
    with pytest.raises(RunNotFoundError, match="no checkpoints for run 'nope'"):
        await build_view(store, "nope")
    fresh = backend.twin(store)  # no cache: reads the damaged object
    backend.tamper(store.objects, step_key(RUN, "tech", 4), b"\x00garbage")
    with pytest.raises(CorruptCheckpointError, match="rewind mirror"):
        await build_view(fresh, RUN)
    if backend.name == "s3":
        with pytest.raises(StoreUnavailableError):
            await build_view(backend.unavailable(), RUN)


async def test_an_experiments_branches_are_grouped_under_it(store: CheckpointStore) -> None:
    """Branches named by `rewind experiment` (exp-<id>-<variant>-<k>) carry their experiment,
    variant and repetition, which the page shows as one group; other branches carry none."""
    cps = await _run(store)
    for k in (1, 2):
        await store.save(next_step(cps[f"{RUN}:main:1"], branch_id=f"exp-t9-fast_one-{k}"))
    view = await build_view(store, RUN)
    by_id = {b["id"]: b for b in view["branches"]}
    assert by_id["exp-t9-fast_one-2"]["experiment"] == {"experiment": "t9", "variant": "fast_one", "repetition": 2}
    assert by_id["exp-t9-fast_one-1"]["experiment"]["repetition"] == 1
    assert "experiment" not in by_id["main"] and "experiment" not in by_id["tech"]
    assert "experiment-group" in render_page(view)  # the page's own grouping code
