"""The soak's invariants, each checked over every run and reported as one line.

    outcome     each run ends in the state an undisturbed run of its shape ends in, and
                every live branch head (messages, tool records, ledger totals) equals the
                reference run's
    effects     per effect identity and lineage, at most one applied effect (the tools'
                own ledger); no call ran again after it had ended well, unless a worker
                or the server died in between; no read-only call ran twice in a lineage
    store       every checkpoint loads and hash-verifies; `rewind mirror` into an empty
                store rebuilds the same step objects, byte for byte; no step gaps
    liveness    no workflow left running; `rewind status RUN` answers for every run
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import Client

from checkpoint_bridge.branches.branching import ledger_of
from checkpoint_bridge.document.schema import AgentCheckpoint
from checkpoint_bridge.checkpoints.store import CheckpointStore, open_checkpoint_store
from workflows.vocabulary.ids import checkpoint_id

from bench.soaking.faults import Fault

BIN = Path(sys.executable).parent
# What faults may legitimately make a call run again after it ended: its
# completion never reached the server.
EXCUSES = ("worker_kill", "server_kill")
LEDGER_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens", "cost_usd", "model_calls", "tool_calls",
                 "cache_hits", "subagent_calls", "subagent_total_tokens", "subagent_cost_usd", "subagent_model_calls",
                 "subagent_tool_calls")


@dataclass
class Check:
    name: str
    checks: int = 0
    violations: list[tuple[str, str]] = field(default_factory=list)  # (run id, what)

    def fail(self, run_id: str, what: str) -> None:
        self.violations.append((run_id, what))

    def line(self) -> str:
        verdict = "ok  " if not self.violations else "FAIL"
        return f"{verdict} {self.name:<9} {self.checks} checks, {len(self.violations)} violations"


# -- snapshots: what an undisturbed run and a disturbed one must agree on -------------------------

def _record(r: Any) -> dict[str, Any]:
    out = {"tool": r.tool_name, "input": r.tool_input, "output": r.tool_output, "error": r.error, "call": r.tool_call_id,
           "side_effects": r.side_effects, "cached": r.served_from_cache, "answered_from": r.answered_from}
    if r.approval:
        out["approval"] = {k: r.approval.get(k) for k in ("verdict", "by", "reason", "timed_out")}
    if r.reused:
        out["reused"] = {k: r.reused.get(k) for k in ("tool_name", "arguments", "branch_id", "step", "origin")}
    if r.subagent:
        out["subagent"] = {k: r.subagent.get(k) for k in ("agent", "branch_id", "state", "steps", "reason")}
    return out


def snapshot(cp: AgentCheckpoint) -> dict[str, Any]:
    ledger = ledger_of(cp).model_dump()
    return {
        "step": cp.step_index, "status": cp.status, "messages": cp.messages, "variables": cp.agent_variables,
        # In the order they were recorded, which for the parallel calls of a step is the
        # order they completed in (a race even undisturbed): compared as a set of records.
        "tools": sorted((_record(r) for r in cp.tool_call_cache), key=lambda r: json.dumps(r, sort_keys=True, default=str)),
        "ledger": {k: (round(ledger[k], 9) if isinstance(ledger[k], float) else ledger[k]) for k in LEDGER_FIELDS},
    }


async def heads(store: CheckpointStore, run_id: str) -> dict[str, AgentCheckpoint]:
    """The newest live (not invalidated) checkpoint of every stored branch."""
    newest: dict[str, Any] = {}
    for s in await store.list_checkpoints(run_id):
        if s.status != "invalidated" and (s.branch_id not in newest or s.step_index > newest[s.branch_id].step_index):
            newest[s.branch_id] = s
    return {b: await store.load(s.checkpoint_id) for b, s in newest.items()}


def first_difference(got: Any, expected: Any, path: str = "") -> str:
    if type(got) is not type(expected):
        return f"{path or '.'}: {got!r:.200} != {expected!r:.200}"
    if isinstance(got, dict):
        for k in sorted(set(got) | set(expected), key=str):
            if k not in got or k not in expected:
                return f"{path}.{k}: only in {'the run' if k in got else 'the reference'}"
            if got[k] != expected[k]:
                return first_difference(got[k], expected[k], f"{path}.{k}")
    if isinstance(got, list):
        if len(got) != len(expected):
            return f"{path}: {len(got)} items, the reference has {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            if g != e:
                return first_difference(g, e, f"{path}[{i}]")
    return f"{path or '.'}: {got!r:.200} != {expected!r:.200}"


# -- the ledger --------------------------------------------------------------------------------

def read_ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = []
    for raw in path.read_text().splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            pass  # a line torn by a SIGKILL mid-write (the fsync'd ones before it are whole)
    return lines


def _lineage(cps: dict[str, AgentCheckpoint], summaries: list[Any], head: AgentCheckpoint) -> set[tuple[str, int]]:
    """(branch, step) of the head's chain of parents; for a rollback's revision `B.rN` also
    every step of B's earlier revisions (the effects a rollback discarded stay the lineage's)."""
    parent = {s.checkpoint_id: s.parent_id for s in summaries}
    where = {s.checkpoint_id: (s.branch_id, s.step_index) for s in summaries}
    chain: set[tuple[str, int]] = set()
    cid: str | None = head.checkpoint_id
    while cid is not None and cid in where:
        chain.add(where[cid])
        cid = parent.get(cid)
    return chain


def _revisions_before(branch: str) -> list[str]:
    base, _, rev = branch.rpartition(".r")
    if not base or not rev.isdigit():
        return []
    return [base] + [f"{base}.r{k}" for k in range(1, int(rev))]


def _excused(faults: list[Fault], after: float, before: float) -> bool:
    return any(f.kind in EXCUSES and f.started is not None and after - 1.0 <= f.started <= before for f in faults)


async def recorded_steps(store: CheckpointStore, summaries: list[Any]) -> dict[tuple[str, str], int]:
    """(branch, tool call id) -> the step that recorded it, for a pipeline's tool calls: a tool
    learns the step the run had reached when the code made the call, and parallel calls made
    together are recorded at the steps in which they complete."""
    ends = await store.step_ends([s.checkpoint_id for s in summaries])
    return {(str(e.fields["branch_id"]), str(e.last_tool_record.get("tool_call_id"))): int(e.fields["step_index"])
            for e in ends if isinstance(e.fields.get("pipeline"), dict) and e.fields["pipeline"].get("kind") != "llm"
            and e.last_tool_record is not None}


def check_effects(check: Check, run_id: str, lines: list[dict[str, Any]], summaries: list[Any],
                  head_cps: dict[str, AgentCheckpoint], faults: list[Fault],
                  recorded: dict[tuple[str, str], int] | None = None) -> None:
    recorded = recorded or {}
    mine = [line for line in lines if line.get("run") == run_id]
    # 1. No call ran again after an execution of it ended well, unless a kill came between.
    by_call: dict[tuple, list[dict]] = defaultdict(list)
    for line in mine:
        by_call[(line["branch"], line["step"], line["call"])].append(line)
    for call, seen in by_call.items():
        check.checks += 1
        seen.sort(key=lambda line: line["at"])
        ok_end = next((line for line in seen if line["kind"] == "end" and line["outcome"] == "ok"), None)
        if ok_end is None:
            continue
        again = [line for line in seen if line["kind"] == "start" and line["at"] > ok_end["at"]]
        if again and not _excused(faults, ok_end["at"], again[0]["at"]):
            check.fail(run_id, f"call {call} ran again (attempt {again[0]['attempt']}) {again[0]['at'] - ok_end['at']:.1f}s "
                               f"after attempt {ok_end['attempt']} had ended well, with no worker or server kill between")
    # 2. Per lineage: an effect applied at most once; a read-only call executed by one call at most.
    summaries_by = summaries
    for branch, head in head_cps.items():
        chain = _lineage({}, summaries_by, head)
        earlier = set(_revisions_before(branch))
        applied: dict[str, list[tuple]] = defaultdict(list)
        read: dict[str, set[tuple]] = defaultdict(set)
        for line in mine:
            spot = (line["branch"], recorded.get((line["branch"], line["call"]), line["step"]))
            if line["kind"] == "effect" and line["applied"] and (spot in chain or line["branch"] in earlier):
                applied[line["effect"]].append((*spot, line["call"], line["key"]))
            if line["kind"] == "end" and line["outcome"] == "ok" and line["key"] is None and spot in chain:
                read[json.dumps([line["tool"], line["args"]], sort_keys=True)].add((*spot, line["call"]))
        for effect, where in applied.items():
            check.checks += 1
            if len(where) > 1:
                check.fail(run_id, f"branch {branch}: effect {effect!r} applied {len(where)} times in one lineage: {where}")
        for call, where in read.items():
            check.checks += 1
            if len(where) > 1:
                check.fail(run_id, f"branch {branch}: read-only {call} executed by {len(where)} calls of one lineage: "
                                   f"{sorted(where)}")


async def mcp_effects(lines: list[dict[str, Any]], store: CheckpointStore,
                      run_ids: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The MCP server's effects as effect lines of the ledger's own shape: the server knows
    only the idempotency key its request carried, the checkpoints' tool records say whose
    call that was (the earliest step that records it). Returns the lines and the keys of
    effects no checkpoint of these runs records (an effect outside every recorded call)."""
    where: dict[str, tuple[str, str, int, str | None]] = {}
    for run_id in run_ids:
        for s in sorted(await store.list_checkpoints(run_id), key=lambda s: s.step_index):
            for r in (await store.load(s.checkpoint_id)).tool_call_cache:
                if r.idempotency_key and r.idempotency_key not in where:
                    where[r.idempotency_key] = (run_id, s.branch_id, s.step_index, r.tool_call_id)
    out, unknown = [], []
    for line in lines:
        if line.get("kind") != "mcp" or line.get("tool") != "post":
            continue
        if line.get("key") not in where:
            unknown.append(str(line.get("key")))
            continue
        run_id, branch, step, call = where[line["key"]]
        out.append({"kind": "effect", "run": run_id, "branch": branch, "step": step, "call": call, "key": line["key"],
                    "applied": line["applied"], "effect": "mcp post " + json.dumps(line["args"], sort_keys=True),
                    "tool": "post", "at": line["at"], "attempt": None})
    return out, unknown


# -- the store ------------------------------------------------------------------------------

async def rewind_cli(env: dict[str, str], cwd: Path, *args: str, timeout_s: float = 180.0) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(str(BIN / "rewind"), *args, env=env, cwd=cwd,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        return -1, out.decode(), f"timed out after {timeout_s:.0f}s; " + err.decode()
    return proc.returncode or 0, out.decode(), err.decode()


async def check_store(check: Check, store: CheckpointStore, run_id: str, env: dict[str, str], scratch: Path) -> None:
    summaries = await store.list_checkpoints(run_id)
    for s in summaries:
        check.checks += 1
        try:
            await store.load(s.checkpoint_id)  # every object of its chain hash-verified
        except Exception as exc:  # noqa: BLE001
            check.fail(run_id, f"{s.checkpoint_id} does not load: {exc}")
    steps: dict[str, set[int]] = defaultdict(set)
    for s in summaries:
        steps[s.branch_id].add(s.step_index)
    for branch, have in steps.items():
        check.checks += 1
        low = 0 if branch == "main" else min(have)
        if have != set(range(low, max(have) + 1)):
            check.fail(run_id, f"branch {branch}: steps {sorted(have)} have a gap")
    # `rewind mirror` into an empty store: the same step objects, byte for byte.
    fresh = scratch / f"mirror-{run_id}"
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    code, out, err = await rewind_cli({**env, "REWIND_STORE": f"file://{fresh / 'store'}"}, fresh, "mirror", run_id, "--json")
    check.checks += 1
    if code != 0:
        check.fail(run_id, f"rewind mirror into an empty store failed ({code}): {err.strip()[-400:]}")
        return
    async with open_checkpoint_store(f"file://{fresh / 'store'}") as rebuilt:
        ours, theirs = await store.raw_objects(run_id), await rebuilt.raw_objects(run_id)
    for key in sorted(k for k in set(ours) | set(theirs) if "/steps/" in k):
        check.checks += 1
        if key not in theirs:
            check.fail(run_id, f"{key} is stored but `rewind mirror` did not rebuild it")
        elif key not in ours:
            check.fail(run_id, f"`rewind mirror` rebuilt {key}, which the live mirror never stored")
        elif ours[key] != theirs[key]:
            check.fail(run_id, f"{key}: the stored bytes differ from what `rewind mirror` rebuilds")


async def check_watch(check: Check, run_id: str, watched: list[Any], store: CheckpointStore, settings: Any,
                      client: Any) -> None:
    """What a watcher got while the run went through the faults: each durable event the store's
    replay of the same branches has, once, with the same data (docs/streaming.md: every durable
    event exactly once; the store fills what the live path lost)."""
    from checkpoint_bridge.checkpoints.lineage import is_revision_name
    from rewind.watching import events

    check.checks += 1
    seen: dict[str, Any] = {}
    for event in watched:
        if event.id in seen:
            check.fail(run_id, f"the watcher got durable event {event.id} twice")
            return
        seen[event.id] = event
    branches = sorted({e.branch for e in watched if not e.path})
    replay: dict[str, Any] = {}
    for branch in branches:
        # The revision it watched, exactly (`main` is followed by `main.r1` after a rollback: a watcher
        # of `main` ends with the revision the rollback stopped).
        exact = branch if is_revision_name(branch) else f"{branch}.r0"
        async for event in events(run_id, exact, settings=settings, client=client, follow=False):
            if event.durable and not (event.path and event.id in replay):
                replay[event.id] = event
    for event_id, event in replay.items():
        check.checks += 1
        got = seen.get(event_id)
        if got is None:
            check.fail(run_id, f"the watcher never got {event_id} ({event.type}), which the store has")
        elif (got.type, got.data) != (event.type, event.data):
            check.fail(run_id, f"the watcher's {event_id} is {got.type} {first_difference(got.data, event.data)}")
    extra = sorted(set(seen) - set(replay))
    cutoffs: dict[str, int | None] = {}
    if extra:
        # A rollback in place discards the steps of the revision it stopped past its step (the store's
        # replay of that revision ends there): a watcher that saw them happen before the rollback saw
        # what the run did then. Anything else it got and the store has not is a violation.
        cutoffs = {branch: cutoff for branch, (_, cutoff) in (await store.stored_steps(run_id)).items()}
        extra = [i for i in extra if not _discarded_by_rollback(seen[i], cutoffs)]
    if extra:
        check.checks += 1
        rolled_back = {b: c for b, c in cutoffs.items() if c is not None}
        check.fail(run_id, f"the watcher got {extra[:5]}, which the store's replay has not (rollback cutoffs: "
                           f"{rolled_back or 'none'})")


def _discarded_by_rollback(event: Any, cutoffs: dict[str, int | None]) -> bool:
    """Whether a watched event is of a step a rollback discarded: past the cutoff of the revision it
    happened on (`main.r0` is stored as `main`)."""
    from checkpoint_bridge.checkpoints.lineage import is_revision_name, revision_branch, split_revision

    if event.path:
        return False
    exact = event.branch if is_revision_name(event.branch) else f"{event.branch}.r0"
    cutoff = cutoffs.get(revision_branch(*split_revision(exact)))
    return cutoff is not None and event.step is not None and event.step > cutoff


async def check_liveness(check: Check, client: Client, run_ids: list[str], env: dict[str, str], cwd: Path) -> None:
    running = [w.id async for w in client.list_workflows("ExecutionStatus = 'Running'")]
    check.checks += 1
    for wid in running:
        check.fail(wid.partition("--")[0], f"workflow {wid} is still running")
    limit = asyncio.Semaphore(2)

    async def status(run_id: str) -> None:
        async with limit:
            code, out, err = await rewind_cli(env, cwd, "status", run_id, "--json")
        check.checks += 1
        if code != 0:
            check.fail(run_id, f"rewind status exited {code}: {err.strip()[-300:]}")
    await asyncio.gather(*(status(r) for r in run_ids))


__all__ = ["Check", "snapshot", "heads", "first_difference", "read_ledger", "check_effects", "check_store", "mcp_effects",
           "check_watch", "check_liveness", "checkpoint_id", "rewind_cli"]
