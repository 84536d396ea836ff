"""Who is asking: REWIND_SERVE_AUTH, the auth hook, and what each identity may see.

    REWIND_SERVE_AUTH=myauth:authenticate rewind serve

`authenticate(request)` is called once per request, with the request's headers, method,
path and query (`AuthRequest`); it may be async. It returns the caller's identity (a
non-empty string, or a dict with `"identity"`), or refuses: it raises `Refused(status,
line)` (from `rewind.serve.agent.identity`; 401 by default), `PermissionError` (403) or
returns None (401). Any other exception is the hook's bug: 500, logged with its traceback.

With a hook, the threads and runs an identity creates are its own: another identity gets 404
for them and finds them in no list or search, their streams included. Rewind's own routes
(GET /runs, a run's status and events, ...) know no owner, so with a hook they answer 403
(rewind/serve/app.py). A run no identity owns (started by the command line, or before the
hook was set) is the operator's: no identity sees it through the server. REWIND_API_KEY
still applies before the hook, as for every route.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from workflows.vocabulary.errors import ConfigError, RunNotFoundError

log = logging.getLogger("rewind.serve")


class Refused(Exception):
    """Raised by an auth hook to refuse a request: `status` (401 unless told) and one line."""

    def __init__(self, line: str = "not authorized", status: int = 401) -> None:
        super().__init__(line)
        self.status = status


@dataclass(frozen=True)
class AuthRequest:
    """What the hook sees of a request."""

    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    query: dict[str, str] = field(default_factory=dict)


# The identity of a request when no hook is set: everything is everyone's.
ANYONE: str | None = None


def load_hook(spec: str | None) -> Callable[[AuthRequest], Any] | None:
    """The function REWIND_SERVE_AUTH names (MODULE:FUNCTION), imported at start: a typo stops
    `rewind serve` with one line, not every request."""
    if not spec:
        return None
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"REWIND_SERVE_AUTH={spec!r}: name the hook as MODULE:FUNCTION (e.g. myauth:authenticate)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"REWIND_SERVE_AUTH={spec!r}: cannot import {module_name!r} ({exc}); run rewind serve where "
                          "it imports (its folder, or PYTHONPATH)") from None
    hook = getattr(module, attribute, None)
    if not callable(hook):
        raise ConfigError(f"REWIND_SERVE_AUTH={spec!r}: {module_name} has no function {attribute!r}")
    return hook


async def identify(hook: Callable[[AuthRequest], Any] | None, request: AuthRequest) -> str | None:
    """The caller's identity (ANYONE without a hook); Refused when the hook refuses."""
    if hook is None:
        return ANYONE
    try:
        answer = hook(request)
        if inspect.isawaitable(answer):
            answer = await answer
    except Refused:
        raise
    except PermissionError as exc:
        raise Refused(str(exc) or "forbidden", 403) from None
    if isinstance(answer, dict):
        answer = answer.get("identity")
    if answer is None or answer == "":
        raise Refused("the auth hook did not let this request in", 401)
    if not isinstance(answer, str):
        raise TypeError(f"the auth hook returned a {type(answer).__name__}: return the identity as a string "
                        "(or {'identity': ...}), or raise Refused")
    return answer


def visible(owner: str | None, identity: str | None, hooked: bool) -> bool:
    """Whether a thing `owner` created is `identity`'s to see."""
    return not hooked or (owner is not None and owner == identity)


def hide(what: str, ident: str) -> RunNotFoundError:
    """The 404 another identity gets: the same words as for a thing that is not there."""
    return RunNotFoundError(f"no {what} {ident!r}")


__all__ = ["ANYONE", "AuthRequest", "Refused", "hide", "identify", "load_hook", "visible"]
