"""Every error `rewind serve` answers: `{"error": "one line"}` with the status that fits.

    404  no such run (or step, or checkpoint), or no such route
    400  input no run could take: a malformed id, a body that is not what the route reads
    401  REWIND_API_KEY is set and the request does not carry it (rewind/serve/auth.py)
    403  a request another site's page sent (its Origin is not this server's)
    409  the run refuses what was asked: a decision it cannot take, an id already taken
    415  a body that does not say it is JSON (Content-Type: application/json)
    503  Temporal or a store does not answer (it may heal by itself: try again)
    500  a bug: the line says so, the server's log has the traceback

The line is the one the command line prints for the same error (RewindError's message
names the object and the fix), so a script and a person read the same words.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.responses import JSONResponse

from workflows.vocabulary.errors import (
    CheckpointNotFoundError,
    CheckpointNotUsableError,
    DecisionRefusedError,
    RewindError,
    RunActiveError,
    RunExistsError,
    RunNotFoundError,
    StoreUnavailableError,
    StoreUnreachableError,
    TemporalConnectionError,
)

log = logging.getLogger("rewind.serve")

ERROR_MEANINGS = {
    400: "bad input: the line says which and why",
    401: "REWIND_API_KEY is set and the request does not carry it",
    403: "another site's page sent it",
    404: "no such run (or branch, step, route)",
    409: "the run refuses it (a decision it cannot take, an id already taken)",
    415: "the body is not JSON (Content-Type: application/json)",
    503: "Temporal or a store does not answer; try again",
}

# The first class an error is an instance of gives its status (subclasses before their bases).
_STATUS: tuple[tuple[type[BaseException], int], ...] = (
    (RunNotFoundError, 404),
    (CheckpointNotFoundError, 404),
    (DecisionRefusedError, 409),
    (RunExistsError, 409),
    (RunActiveError, 409),
    (CheckpointNotUsableError, 409),
    (TemporalConnectionError, 503),
    (StoreUnreachableError, 503),
    (StoreUnavailableError, 503),
    (RewindError, 400),
)


class ErrorBody(BaseModel):
    error: str


class HTTPError(Exception):
    """An answer other than 2xx that no RewindError stands for (a missing body, a route that is not there)."""

    def __init__(self, status: int, line: str) -> None:
        super().__init__(line)
        self.status = status


def one_line(text: str, limit: int = 2000) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def error_response(status: int, line: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": one_line(line)}, status_code=status, headers=headers)


def validation_line(exc: ValidationError) -> str:
    """A body pydantic refused, in one line: each field and what is wrong with it."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ())) or "body"
        message = error.get("msg", "invalid")
        if error.get("type") == "extra_forbidden":
            message = "not a field this route takes"
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def status_of(exc: BaseException) -> int | None:
    """The status an error is answered with, or None for one that is a bug."""
    if isinstance(exc, HTTPError):
        return exc.status
    if isinstance(exc, ValidationError):
        return 400
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    if _temporal_unavailable(exc):
        return 503
    return None


def _temporal_unavailable(exc: BaseException) -> bool:
    """Temporal's service stopped answering mid-request (its RPCError: unavailable, deadline)."""
    try:
        from temporalio.service import RPCError, RPCStatusCode
    except ImportError:  # pragma: no cover - temporalio is a dependency
        return False
    return isinstance(exc, RPCError) and exc.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)


def answer_error(exc: BaseException, where: str) -> JSONResponse:
    """The JSON answer to `exc` raised while serving `where` (METHOD PATH); a bug is logged with its traceback."""
    status = status_of(exc)
    if status is None:
        log.error("%s: unexpected %s", where, type(exc).__name__, exc_info=exc)
        return error_response(500, f"unexpected {type(exc).__name__}: {one_line(str(exc), 500)} (this is a bug; "
                                   "the server's log has the traceback)")
    if isinstance(exc, ValidationError):
        return error_response(400, validation_line(exc))
    if status == 503:
        log.warning("%s: %s", where, one_line(str(exc)))
    return error_response(status, str(exc))


def from_starlette(status: int, detail: Any) -> JSONResponse:
    """Starlette's own 404 / 405 (no route, a method the route does not take), as JSON."""
    line = {404: "no such route; GET /docs lists them", 405: "this route does not take that method; GET /docs "
            "lists what it takes"}.get(status, str(detail))
    return error_response(status, line)


__all__ = ["ERROR_MEANINGS", "ErrorBody", "HTTPError", "answer_error", "error_response", "from_starlette",
           "one_line", "status_of", "validation_line"]
