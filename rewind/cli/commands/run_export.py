"""`rewind export --runs`: runs as data, selected by the filters of `rewind runs`.

    --format jsonl     one conversation per branch, OpenAI chat format with `tools` (views/conversations.py)
    --format parquet   one row per step (views/step_rows.py), pyarrow (the `export` extra)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rewind.cli.commands.common import emit, open_checkpoints
from rewind.cli.commands.runs import run_query, select_runs
from rewind.settings.config import Settings
from workflows.vocabulary.errors import RewindError, UsageError

# Every run the filters select, unless --limit says fewer.
ALL_RUNS = 1_000_000_000
DEFAULT_PARQUET = "runs.parquet"


async def cmd_export_runs(args: argparse.Namespace, settings: Settings) -> int:
    if args.checkpoint is not None:
        raise UsageError(f"--runs exports the runs the filters select, not checkpoint {args.checkpoint}: leave out "
                         "the checkpoint id, or --runs")
    args.format = args.format or "jsonl"
    if args.format not in ("jsonl", "parquet"):
        raise UsageError(f"--runs writes --format jsonl (conversations) or parquet (steps), not {args.format}")
    out = args.out or (DEFAULT_PARQUET if args.format == "parquet" else "-")
    if out == "-" and args.json:
        raise UsageError("--out - writes the export on stdout and --json a summary of it; choose one")
    if args.format == "parquet":
        from checkpoint_bridge.views.parquet import schema

        schema()  # pyarrow is there, before anything is read
    # Selecting runs as `rewind runs` does reads Temporal's visibility: its connection settings too.
    settings = Settings.from_env()
    async with open_checkpoints(settings) as store:
        listed, client = await select_runs(args, settings, store, run_query(args, limit=args.limit or ALL_RUNS))
        # Oldest first: a file that grows at its end as runs come. A run the store holds nothing of
        # (Temporal lists it, no checkpoint of it is here) has no data to export: counted apart.
        runs = [r for r in reversed(listed.runs) if r.stored]
        unstored = len(listed.runs) - len(runs)
        if args.format == "parquet":
            from checkpoint_bridge.views.parquet import write_parquet
            from checkpoint_bridge.views.step_rows import step_rows

            rows = await step_rows(store, [r.run_id for r in runs])
            if out == "-":
                sys.stdout.flush()
                count = write_parquet(rows, sys.stdout.buffer)
                return 0
            count = write_parquet(rows, Path(out))
            what = f"{count} step(s)"
        else:
            from checkpoint_bridge.views.conversations import conversations

            from rewind.stores import payload_store

            lines = []
            payloads = payload_store(settings)
            try:
                tools_for = _offered(client, payloads) if client is not None else None
                for r in runs:
                    info = {"state": r.state, "agent": r.agent, "kind": r.kind}
                    lines += [json.dumps(c, ensure_ascii=False, sort_keys=True) for c in
                              await conversations(store, r.run_id, info, tools_for)]
            finally:
                await payloads.aclose()
            data = "".join(line + "\n" for line in lines).encode("utf-8")
            if out == "-":
                sys.stdout.flush()
                sys.stdout.buffer.write(data)
                return 0
            try:
                Path(out).write_bytes(data)
            except OSError as exc:
                raise RewindError(f"cannot write {out}: {exc.strerror or exc}") from exc
            count = len(lines)
            what = f"{count} conversation(s)"
    more = "; more runs match: raise --limit" if listed.more else ""
    apart = f" ({unstored} run(s) Temporal lists have no checkpoint in this store yet)" if unstored else ""
    emit({"format": args.format, "out": str(Path(out).resolve()), "runs": len(runs), "rows" if args.format == "parquet"
          else "conversations": count, "more": listed.more, "temporal": listed.temporal, "not_in_store": unstored},
         args.json, f"wrote {what} of {len(runs)} run(s) to {out}{apart}{more}")
    return 0


def _offered(client: Any, payloads: Any) -> Any:
    """tools_for(run, branch): the tools a branch's model was offered, from its history (the
    schemas inline, or by digest from the payload store), or None when they cannot be found."""
    from activities.model.transcript import TranscriptStore
    from checkpoint_bridge.temporal.offered_tools import offered_tools
    from workflows.vocabulary.errors import RewindError as Unreadable

    transcripts = TranscriptStore(payloads)

    async def tools_for(run_id: str, branch_id: str) -> list[dict[str, Any]] | None:
        try:
            found = await offered_tools(client, run_id, branch_id)
            if found is None:
                return None
            tools, digest = found
            return tools if digest is None else await transcripts.tools(digest)
        except Unreadable:  # a payload store that lost them: the calls say what was used
            return None

    return tools_for


__all__ = ["cmd_export_runs"]
