"""`rewind health`: is the worker on this machine polling Temporal?

The worker rewrites its health file every few seconds while it polls
(rewind/worker/main.py: `HealthFile`) and removes it when it stops. Healthy means:
the file is fresh, its process is alive, and Temporal answered the worker's
last health check. This is the container health check of docker-compose.yml.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

from rewind.temporal.dev_server import process_alive


def worker_health(path: Path, *, max_age_s: float = 30.0) -> dict[str, Any]:
    """{"healthy": bool, "reason": str, ...the health file's fields}."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {"healthy": False, "reason": f"no worker health file at {path}; no worker runs here (or REWIND_HOME differs)"}
    except (OSError, ValueError) as exc:
        return {"healthy": False, "reason": f"unreadable worker health file {path}: {exc}"}
    age = time.time() - float(doc.get("updated_at", 0))
    report: dict[str, Any] = {**doc, "age_s": round(age, 1)}
    if doc.get("host") == socket.gethostname() and not process_alive(int(doc.get("pid", 0))):
        return {**report, "healthy": False, "reason": f"worker process {doc.get('pid')} is gone"}
    if age > max_age_s:
        return {**report, "healthy": False, "reason": f"the worker last reported {age:.0f}s ago (more than {max_age_s:g}s)"}
    if not doc.get("temporal_ok"):
        return {**report, "healthy": False, "reason": f"Temporal at {doc.get('temporal_address')} does not answer: {doc.get('error')}"}
    return {**report, "healthy": True,
            "reason": f"polling task queue {doc.get('task_queue')!r} on {doc.get('temporal_address')} (pid {doc.get('pid')})"}


__all__ = ["worker_health"]
