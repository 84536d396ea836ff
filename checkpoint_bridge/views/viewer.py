"""`rewind view`: one self-contained HTML page of a run, drawn from the checkpoint store alone.

The page (``viewer_page.html``, package data) holds its CSS, its script and the
run's data inline: no server, no network, so it opens from a bug report long
after Temporal's retention dropped the history. Its script draws the tree of
branches and revisions, the steps, their messages and tool calls, per-step
charts and the comparison of two branches, building only what is on screen.

The data is compact: every checkpoint carries only what it adds to its parent
(`[kept, new]` for messages and tool records, variables only when they
changed), so a fork's shared prefix is in the page once, and a tool record's
output is left out when it is the content of the tool message that answered
it. The comparisons are `diff_branches`'s own JSON (what `rewind diff --json`
prints), one per pair of branch names; the page swaps the sides for B..A.

The run is read in step order with `CheckpointStore.document`, one object and
no copy per step; only what each step added is validated (``load`` of every
checkpoint would validate every whole conversation again: quadratic).
Everything from the checkpoints is untrusted text: the data is embedded as
JSON with `<`, `>` and `&` escaped, the script puts it in the page as text
nodes only, and the page's Content-Security-Policy runs no script but its own
(by hash) and loads nothing.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from importlib import resources
from typing import Any

from checkpoint_bridge.views.diff import diff_branches, diff_json
from checkpoint_bridge.views.inspect import tree
from checkpoint_bridge.checkpoints.lineage import display_name, is_revision_name, lineage_in, split_revision
from checkpoint_bridge.document.migrations import validate_document
from checkpoint_bridge.document.schema import AgentCheckpoint, CheckpointSummary, ToolCallRecord, format_datetime
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.canonical import canonical_json
from workflows.vocabulary.errors import CheckpointError, RewindError
from workflows.vocabulary.experiments import parse_branch_name
from workflows.vocabulary.ids import parse_checkpoint_id
from workflows.vocabulary.text import scrub_text

__all__ = ["VIEW_FORMAT", "build_view", "empty_view", "render_page", "script_json", "view_page"]

VIEW_FORMAT = "rewind.view/v1"
_TEMPLATE = "viewer_page.html"
_PLACEHOLDER = re.compile(r"__REWIND_(TITLE|CSP|DATA|LIVE)__")
# What the embedded JSON must not contain raw inside a <script> element (and the two
# line separators older JavaScript parsers reject): JSON escapes for all of them.
_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


# A fork that changed the system prompt replaces one message of the shared prefix:
# kept as a patch, so the prefix is still not repeated. More changes than this: not a prefix.
_MAX_PATCHES = 4


class _Step:
    """What one checkpoint adds to its parent, validated; enough to rebuild its lineage.

    Its messages are ``parent[:kept_messages]`` with ``patches`` (index, message)
    put in, then ``checkpoint.messages``; its tool records ``parent[:kept_tools]``
    then ``checkpoint.tool_call_cache``."""

    __slots__ = ("summary", "checkpoint", "parent", "kept_messages", "patches", "kept_tools")

    def __init__(self, summary: CheckpointSummary, checkpoint: AgentCheckpoint, parent: int | None,
                 kept_messages: int, patches: list[tuple[int, dict[str, Any]]], kept_tools: int) -> None:
        self.summary, self.checkpoint, self.parent = summary, checkpoint, parent
        self.kept_messages, self.patches, self.kept_tools = kept_messages, patches, kept_tools


def _shared(child: list[Any], parent: list[Any], max_patches: int = 0) -> tuple[int, list[int]]:
    """(kept, changed): `child` is `parent[:kept]` with the items at `changed` replaced,
    then its own. A document shares its parent's dicts, so the usual case is one
    C-level pass of identity checks."""
    n = len(parent)
    if len(child) >= n and child[:n] == parent:
        return n, []
    if max_patches and len(child) >= n:
        changed = [k for k in range(n) if child[k] is not parent[k] and child[k] != parent[k]]
        if len(changed) <= max_patches:
            return n, changed
    k, limit = 0, min(n, len(child))
    while k < limit and child[k] == parent[k]:
        k += 1
    return k, []


async def _read_steps(store: CheckpointStore, summaries: list[CheckpointSummary]) -> list[_Step]:
    index = {s.checkpoint_id: i for i, s in enumerate(summaries)}
    steps: list[_Step] = []
    for s in summaries:
        doc = await store.document(s.checkpoint_id)
        parent = index.get(s.parent_id) if s.parent_id else None
        kept_m, changed, kept_t = 0, [], 0
        if parent is not None:
            pdoc = await store.document(s.parent_id)  # type: ignore[arg-type]  # cached: read just before
            kept_m, changed = _shared(doc["messages"], pdoc["messages"], _MAX_PATCHES)
            kept_t, _ = _shared(doc["tool_call_cache"], pdoc["tool_call_cache"])
        messages = [doc["messages"][k] for k in changed] + doc["messages"][kept_m:]
        own = {**doc, "messages": messages, "tool_call_cache": doc["tool_call_cache"][kept_t:]}
        checkpoint = validate_document(own, s.checkpoint_id)  # only what this step added
        patches = list(zip(changed, checkpoint.messages[:len(changed)]))
        checkpoint = checkpoint.model_copy(update={"status": s.status, "messages": checkpoint.messages[len(changed):]})
        steps.append(_Step(s, checkpoint, parent, kept_m, patches, kept_t))
    return steps


def _lineage(steps: list[_Step], index: dict[str, int], line: list[CheckpointSummary]) -> list[AgentCheckpoint]:
    """Whole checkpoints of a lineage (root first, each the parent of the next), rebuilt
    from the steps: lists of shared references, no copies of messages."""
    out: list[AgentCheckpoint] = []
    messages: list[dict[str, Any]] = []
    tools: list[ToolCallRecord] = []
    for s in line:
        step = steps[index[s.checkpoint_id]]
        messages = messages[:step.kept_messages] + step.checkpoint.messages
        for k, message in step.patches:
            messages[k] = message
        tools = tools[:step.kept_tools] + step.checkpoint.tool_call_cache
        out.append(step.checkpoint.model_copy(update={"messages": messages, "tool_call_cache": tools}))
    return out


def _outcome(r: ToolCallRecord) -> str:
    """The call's outcome in the metrics' words: ok, error, cached, reused, rejected."""
    if (r.approval or {}).get("verdict") == "rejected":
        return "rejected"
    if r.error is not None:
        return "error"
    if r.reused is not None:
        return "reused"
    if r.dry_run:
        return "dry-run"
    return "cached" if r.served_from_cache else "ok"


# Left out of a tool record when they hold their default (the page reads a missing one as it).
_RECORD_DEFAULTS = {"error": None, "tool_call_id": None, "idempotency_key": None, "side_effects": False,
                    "served_from_cache": False, "tool_output": None, "duration_ms": 0}
# A diff's tool-call rows, likewise (`reused` and the flags false, `error` and `decision` none).
_CALL_ROW_DEFAULTS = {"error": None, "decision": None, "side_effects": False, "served_from_cache": False,
                      "subagent": None, "kept": False, "dry_run": False,
                      "reused": False}


def _without(row: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    # Same type and value: a tool's output 0 or False is not the default None.
    return {k: v for k, v in row.items()
            if not (k in defaults and type(v) is type(defaults[k]) and v == defaults[k])}


def _record(r: ToolCallRecord, answers: dict[str, Any]) -> dict[str, Any]:
    row = _without(r.model_dump(mode="json"), _RECORD_DEFAULTS)
    row["outcome"] = _outcome(r)
    if isinstance(row.get("tool_output"), str) and answers.get(r.tool_call_id or "") == row["tool_output"]:
        del row["tool_output"]
        row["output_in_message"] = True  # the page reads it from the step's tool message
    return row


def _checkpoint_row(step: _Step, branch: int, previous_variables: Any) -> dict[str, Any]:
    cp = step.checkpoint
    answers = {m.get("tool_call_id"): m.get("content") for m in cp.messages
               if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str)}
    row: dict[str, Any] = {
        "id": cp.checkpoint_id, "b": branch, "s": cp.step_index, "p": step.parent, "l": cp.step_label,
        "st": cp.status, "at": format_datetime(cp.created_at), "mo": cp.model,
        "tk": [cp.llm_tokens_used, cp.prompt_tokens, cp.completion_tokens], "usd": cp.llm_cost_usd,
        "m": [step.kept_messages, cp.messages],
        **({"mp": [[k, m] for k, m in step.patches]} if step.patches else {}),
        "t": [step.kept_tools, [_record(r, answers) for r in cp.tool_call_cache]],
    }
    if step.parent is None and cp.parent_id is not None:
        row["po"] = cp.parent_id  # a parent the store does not have
    if previous_variables is None or canonical_json(previous_variables) != canonical_json(cp.agent_variables):
        row["v"] = cp.agent_variables
    for key, value in (("err", cp.error_info), ("led", _ledger(cp.ledger)), ("mv", cp.model_view)):
        if value is not None:
            row[key] = value
    return row


_SCOPES = ("step", "branch", "total")


def ledger_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The ledger fields any checkpoint of the page has, in the ledger's own order: the
    same columns in the same order on every step."""
    from workflows.vocabulary.contracts import Ledger

    present = {key for row in rows for values in (row.get("led") or {}).values() if isinstance(values, dict)
               for key in values}
    return [*(k for k in Ledger.model_fields if k in present), *sorted(present - set(Ledger.model_fields))]


def _ledger(ledger: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ledger without its zero fields; a branch scope equal to the total (nothing
    inherited) as the word "total"."""
    if ledger is None:
        return None
    out: dict[str, Any] = {}
    # One order of rows on every step (the page shows them as stored).
    order = {scope: i for i, scope in enumerate(_SCOPES)}
    for scope, values in sorted(ledger.items(), key=lambda item: (order.get(item[0], len(order)), item[0])):
        if scope == "branch" and values == ledger.get("total"):
            out[scope] = "total"
        elif isinstance(values, dict):
            out[scope] = {k: v for k, v in values.items() if v != 0 or isinstance(v, bool)}
        else:
            out[scope] = values
    return out


def _compact_diff(d: dict[str, Any], index: dict[str, int], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`diff_json`'s document with each side's step rows as the checkpoints they name
    (`steps_at`: the page has their step, label and status) and its tool-call rows
    without default values; rows that do not match their checkpoint stay as they are."""
    out = dict(d)
    for side in ("a", "b"):
        data = dict(d[side])
        at = [index.get(r["checkpoint_id"]) for r in data["steps"]]
        if all(i is not None and (rows[i]["s"], rows[i]["l"], rows[i]["st"]) == (r["step_index"], r["step_label"], r["status"])
               for i, r in zip(at, data["steps"])):
            del data["steps"]
            data["steps_at"] = at
        data["tool_calls"] = [_without(c, _CALL_ROW_DEFAULTS) for c in data["tool_calls"]]
        out[side] = data
    return out


def _branches(summaries: list[CheckpointSummary]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    index = {s.checkpoint_id: i for i, s in enumerate(summaries)}
    for i, s in enumerate(summaries):
        if not out or out[-1]["id"] != s.branch_id:
            name, revision = split_revision(s.branch_id)
            origin = None
            if s.parent_id is not None:
                _run, parent_branch, parent_step = parse_checkpoint_id(s.parent_id)
                if parent_branch != s.branch_id:
                    origin = f"{parent_branch}:{parent_step}"
            kind = "root" if origin is None else ("rollback" if revision else "fork")
            called_by = (s.agent or {}).get("called_by")
            if called_by:  # a sub-agent's run: drawn from the caller's step that called it
                _run, caller_branch, caller_step = parse_checkpoint_id(called_by)
                kind, origin = "subagent", f"{caller_branch}:{caller_step}"
            out.append({"id": s.branch_id, "name": name, "revision": revision, "kind": kind, "origin": origin,
                        "from": i, "to": i, "invalidated": 0})
            if called_by:
                out[-1].update(agent=(s.agent or {}).get("name"), call=(s.agent or {}).get("tool_call_id"))
                if called_by in index:
                    out[-1]["caller"] = index[called_by]
            experiment = parse_branch_name(name)
            if experiment is not None:  # grouped on the page under its experiment
                out[-1]["experiment"] = experiment
        out[-1]["to"] = i
        out[-1]["invalidated"] += s.status == "invalidated"
    return out


def _names(summaries: list[CheckpointSummary]) -> list[str]:
    """The names `rewind diff` takes: each branch, and the older revisions of a rolled-back one
    (not sub-agents' runs: each is compared where its caller's branches are)."""
    names = list(dict.fromkeys(display_name(s.branch_id) for s in summaries if not (s.agent or {}).get("called_by")))
    stored = list(dict.fromkeys(s.branch_id for s in summaries))
    for name in list(names):
        revisions = sorted(split_revision(b)[1] for b in stored if split_revision(b)[0] == name)
        names += [f"{name}.r{r}" for r in revisions[:-1]]
    return names


async def build_view(store: CheckpointStore, run_id: str) -> dict[str, Any]:
    """The page's data: branches, every checkpoint as what it adds, every pair's diff."""
    summaries = await tree(store, run_id)  # checks the id; RunNotFoundError when there is nothing
    steps = await _read_steps(store, summaries)
    index = {s.checkpoint_id: i for i, s in enumerate(summaries)}
    branches = _branches(summaries)
    branch_of = {b["id"]: i for i, b in enumerate(branches)}
    rows, variables = [], {}  # variables: by checkpoint index, to leave unchanged ones out
    for i, step in enumerate(steps):
        previous = variables.get(step.parent) if step.parent is not None else None
        rows.append(_checkpoint_row(step, branch_of[step.summary.branch_id], previous))
        variables[i] = step.checkpoint.agent_variables
    names = _names(summaries)
    lines, unusable = {}, {}
    for name in names:
        try:
            lines[name] = lineage_in(summaries, name, store.url)
        except RewindError as exc:  # a parent missing from the store: the rest of the page still shows
            unusable[name] = str(exc)
    checkpoints = {name: _lineage(steps, index, line) for name, line in lines.items()}
    diffs = {}
    usable = [n for n in names if n in lines]
    for i, a in enumerate(usable):
        for b in usable[i + 1:]:
            try:
                result = diff_branches(run_id, a, checkpoints[a], b, checkpoints[b],
                                       rolled_back=[n for n in (a, b) if is_revision_name(n)])
            except RewindError as exc:  # what `rewind diff A B` would say (a fork of a step rolled back since)
                diffs[f"{a}..{b}"] = {"error": str(exc)}
                continue
            diffs[f"{a}..{b}"] = _compact_diff(diff_json(result), index, rows)
    return {
        "format": VIEW_FORMAT, "run_id": run_id, "store": store.url, "branches": branches,
        "names": [{"name": n, "head": index[lines[n][-1].checkpoint_id]} if n in lines else {"name": n, "error": unusable[n]}
                  for n in names],
        "checkpoints": rows, "diffs": diffs, "ledger_columns": ledger_columns(rows),
    }


def empty_view(run_id: str, store_url: str) -> dict[str, Any]:
    """`build_view`'s data of a run with no checkpoint yet (a live page drawn before its first step)."""
    return {"format": VIEW_FORMAT, "run_id": run_id, "store": store_url, "branches": [], "names": [],
            "checkpoints": [], "diffs": {}, "ledger_columns": []}


def script_json(data: dict[str, Any]) -> str:
    """`data` as JSON that can stand inside a <script> element (and nothing in it closes one)."""
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:  # NaN or Infinity in a tool's output: not JSON a browser reads
        raise CheckpointError(f"run {data['run_id']!r} holds a value that is not plain JSON ({exc}); "
                              "rebuild it with `rewind mirror RUN`") from exc
    return re.sub("[<>&\u2028\u2029]", lambda m: _SCRIPT_UNSAFE[m[0]], scrub_text(text))


def _csp_hashes(page: str, tag: str) -> str:
    """'sha256-…' of every inline <script>/<style> element that carries `data-csp`."""
    found = re.findall(rf"<{tag} data-csp>(.*?)</{tag}>", page, re.S)
    if not found:
        raise RuntimeError(f"the viewer template has no <{tag} data-csp> element")
    return " ".join("'sha256-" + base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode() + "'"
                    for body in found)


def render_page(view: dict[str, Any], *, live: str = "") -> str:
    """The whole HTML page for `build_view`'s data. `live`: markup put at the end of the body
    (its own `<style data-csp>` and `<script data-csp>` elements, allowed by their hashes, and
    requests to the page's own origin): `rewind serve`'s live page (rewind/serve/page.py) is
    this page, drawn again as the run goes on."""
    template = resources.files("checkpoint_bridge.views").joinpath(_TEMPLATE).read_text(encoding="utf-8")
    code = template.replace("__REWIND_LIVE__", live)  # the elements to hash: the template's and live's
    connect = "'self'" if live else "'none'"
    csp = (f"default-src 'none'; script-src {_csp_hashes(code, 'script')}; "
           f"style-src {_csp_hashes(code, 'style')}; img-src data:; connect-src {connect}; base-uri 'none'; "
           "form-action 'none'")
    values = {"TITLE": html.escape(f"rewind view: {view['run_id']}"), "CSP": html.escape(csp),
              "DATA": script_json(view), "LIVE": live}
    # One pass: nothing substituted is scanned again (a run id may spell a placeholder).
    return _PLACEHOLDER.sub(lambda m: values[m[1]], template)


async def view_page(store: CheckpointStore, run_id: str) -> tuple[bytes, dict[str, Any]]:
    """The page's bytes and its data (what `rewind view` writes)."""
    view = await build_view(store, run_id)
    return render_page(view).encode("utf-8"), view
