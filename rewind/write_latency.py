"""Checkpoint write latency, as the workers measured it (`rewind stats --metrics URL`).

The checkpoint store does not record how long a write took: a checkpoint is a
deterministic projection of history (the same bytes on every mirror), so a timing cannot
be in it. The live mirror times each step's write (`save_step`) and each step's lag
behind its model call and tools, and a worker with REWIND_METRICS_PORT serves them as
the Prometheus histograms `rewind_checkpoint_write_ms` and `rewind_mirror_lag_ms`
(since the worker started). This reads them from one or more workers' endpoints and adds
them up: count, mean, and p50 / p95 / p99 estimated from the buckets as Prometheus's
`histogram_quantile` does (linear within a bucket).
"""

from __future__ import annotations

import asyncio
import math
import re
import urllib.error
import urllib.request

from pydantic import BaseModel

from workflows.vocabulary.errors import ConfigError
from workflows.vocabulary.metrics import CHECKPOINT_WRITE_MS, MIRROR_LAG_MS

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)")
_LE = re.compile(r'le="([^"]+)"')


class Histogram(BaseModel):
    count: int = 0
    sum_ms: float = 0.0
    mean_ms: float | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None


class WriteLatency(BaseModel):
    sources: list[str]  # the metrics endpoints read
    checkpoint_write: Histogram  # one step's checkpoint, written (save_step)
    mirror_lag: Histogram  # from a step's end to its checkpoint written


def _quantile(q: float, buckets: list[tuple[float, float]], count: float) -> float | None:
    """histogram_quantile over cumulative (upper bound, count) buckets."""
    if count <= 0:
        return None
    rank, lower, below = q * count, 0.0, 0.0
    for upper, cumulative in buckets:
        if cumulative >= rank:
            if math.isinf(upper):
                return lower  # above the last finite bound: its bound is what is known
            inside = cumulative - below
            return lower + (upper - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = upper, cumulative
    return lower


def parse(text: str, name: str) -> Histogram:
    """The histogram `name` of a Prometheus text exposition, every series added up."""
    buckets: dict[float, float] = {}
    total, count = 0.0, 0.0
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if found is None or line.startswith("#"):
            continue
        metric, labels, value = found.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        if metric == f"{name}_bucket":
            le = _LE.search(labels or "")
            if le is not None:
                bound = float("inf") if le[1] == "+Inf" else float(le[1])
                buckets[bound] = buckets.get(bound, 0.0) + number
        elif metric == f"{name}_sum":
            total += number
        elif metric == f"{name}_count":
            count += number
    ordered = sorted(buckets.items())
    return Histogram(count=int(count), sum_ms=total, mean_ms=total / count if count else None,
                     p50_ms=_quantile(0.5, ordered, count), p95_ms=_quantile(0.95, ordered, count),
                     p99_ms=_quantile(0.99, ordered, count))


def _read(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ConfigError(f"cannot read worker metrics at {url}: {reason}; give the URL of a running worker's "
                          "endpoint (http://HOST:PORT/metrics, the worker started with REWIND_METRICS_PORT=PORT)") from exc


async def write_latency(urls: list[str]) -> WriteLatency:
    """The workers' checkpoint write and mirror lag histograms at `urls`, added up."""
    texts = await asyncio.gather(*(asyncio.to_thread(_read, url) for url in urls))
    text = "\n".join(texts)
    return WriteLatency(sources=list(urls), checkpoint_write=parse(text, CHECKPOINT_WRITE_MS),
                        mirror_lag=parse(text, MIRROR_LAG_MS))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def latency_text(found: WriteLatency) -> str:
    lines = []
    for title, h in (("checkpoint write", found.checkpoint_write), ("mirror lag", found.mirror_lag)):
        lines.append(f"{title:<17}{h.count} write(s): mean {_ms(h.mean_ms)}, p50 {_ms(h.p50_ms)}, "
                     f"p95 {_ms(h.p95_ms)}, p99 {_ms(h.p99_ms)}")
    lines.append(f"                 (from {len(found.sources)} worker endpoint(s), since each started)")
    return "\n".join(lines)


__all__ = ["Histogram", "WriteLatency", "write_latency", "latency_text", "parse"]
