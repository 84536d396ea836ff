"""Step rows (step_rows.py) as one Parquet file, for DuckDB, pandas or polars.

pyarrow is an optional extra (`pip install 'rewind-agents[export]'`); only this module
imports it, when a file is written. The columns have fixed types, so an empty export
and a full one read back alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

from checkpoint_bridge.views.step_rows import StepRow
from workflows.vocabulary.errors import ConfigError, RewindError


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401 - the writer
    except ImportError as exc:
        raise ConfigError("--format parquet needs pyarrow: pip install 'rewind-agents[export]' "
                          "(or export --format jsonl, which needs nothing)") from exc
    return pyarrow


def schema() -> Any:
    pa = _pyarrow()
    call = pa.struct([("tool", pa.string()), ("cached", pa.bool_()), ("reused", pa.bool_()), ("failed", pa.bool_()),
                      ("subagent", pa.bool_()), ("retries", pa.int64()), ("duration_ms", pa.int64())])
    return pa.schema([
        ("run_id", pa.string()), ("branch_id", pa.string()), ("branch", pa.string()), ("step", pa.int64()),
        ("label", pa.string()), ("status", pa.string()), ("created_at", pa.timestamp("us", tz="UTC")),
        ("duration_ms", pa.float64()), ("kind", pa.string()), ("agent", pa.string()), ("subagent", pa.bool_()),
        ("model", pa.string()), ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()),
        ("total_tokens", pa.int64()), ("cost_usd", pa.float64()), ("model_calls", pa.int64()),
        ("tool_calls", pa.int64()), ("cache_hits", pa.int64()), ("tools", pa.list_(pa.string())),
        ("calls", pa.list_(call)), ("tool_errors", pa.int64()), ("model_retries", pa.int64()),
        ("tool_retries", pa.int64()), ("retries", pa.int64()), ("errors", pa.list_(pa.string())),
        ("final_answer", pa.string()), ("experiment", pa.string()), ("variant", pa.string()),
        ("repetition", pa.int64()),
    ])


def write_parquet(rows: list[StepRow], out: Path | BinaryIO) -> int:
    """Write the rows to `out` (a path or a binary stream); returns how many."""
    pa = _pyarrow()
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([r.model_dump() for r in rows], schema=schema())
    try:
        pq.write_table(table, out)
    except OSError as exc:
        raise RewindError(f"cannot write {out}: {exc}") from exc
    return table.num_rows


__all__ = ["write_parquet", "schema"]
