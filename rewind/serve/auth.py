"""Who may talk to `rewind serve`: REWIND_API_KEY, and where the server may listen.

- REWIND_API_KEY set: every request carries it, as `x-api-key: KEY` or
  `Authorization: Bearer KEY`; a browser's EventSource cannot send headers, so
  `?api_key=KEY` is taken too, and a page opened with it is answered with a cookie
  (`rewind_api_key`, HttpOnly, SameSite=Strict) and sent to the same address without
  the key, out of the address bar and the history; the page's own requests then carry
  the cookie. Anything else: 401.
- Not set: the server listens on loopback only (`check_bind` refuses any other address
  at start, naming the fix), and answers only requests addressed to a loopback name, so
  a web page the browser loads from elsewhere cannot reach it through DNS rebinding.

Whatever the key: a request that changes something (POST) and carries another site's
Origin is refused (403), and a body must say it is JSON (rewind/serve/app.py), which a page
of another site cannot send without this server's leave: no other site's page starts a run
or decides a call through the browser of someone on this machine.

The key is compared in constant time and never logged (the access log leaves `api_key`
out of the query it shows).
"""

from __future__ import annotations

import hmac
import ipaddress
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

from rewind.serve.errors import error_response
from workflows.vocabulary.errors import ConfigError

KEY_PARAM = "api_key"
KEY_HEADER = "x-api-key"
KEY_COOKIE = "rewind_api_key"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name, IPv6 with or without brackets) is this machine's loopback."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_key(key: str) -> None:
    """A key an HTTP header can carry as given."""
    if key and not all(33 <= ord(c) <= 126 for c in key):
        raise ConfigError("REWIND_API_KEY holds spaces or characters an HTTP header cannot carry; use printable "
                          "ASCII without spaces (e.g. `openssl rand -hex 32`)")


def check_bind(host: str, key: str) -> None:
    """Refuse to listen beyond this machine without a key."""
    check_key(key)
    if not key and not is_loopback(host):
        raise ConfigError(f"rewind serve --host {host} would answer anyone who can reach this machine, and "
                          "REWIND_API_KEY is not set: set it (every request must then carry it), or listen on "
                          "127.0.0.1")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def given_key(scope: Scope) -> tuple[str | None, str]:
    """(the key the request carries, where: header, bearer, cookie or query)."""
    header = _header(scope, KEY_HEADER.encode())
    if header:
        return header.strip(), "header"
    authorization = _header(scope, b"authorization") or ""
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip(), "bearer"
    cookie = _header(scope, b"cookie")
    if cookie:
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(cookie)
        except Exception:  # noqa: BLE001 - a malformed cookie header carries no key
            jar = SimpleCookie()
        if KEY_COOKIE in jar:
            return jar[KEY_COOKIE].value, "cookie"
    for name, value in parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True):
        if name == KEY_PARAM:
            return value, "query"
    return None, ""


def without_key(query_string: bytes) -> str:
    """The query string with `api_key` left out (for the log, and the address a page is sent to)."""
    pairs = [(k, v) for k, v in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True) if k != KEY_PARAM]
    return urlencode(pairs)


def _host_name(host: str) -> str:
    """The name of a Host header, without its port (`[::1]:8710` -> `[::1]`)."""
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0]


def _same_origin(scope: Scope) -> bool:
    """Whether a request that changes something (not GET or HEAD) came from this server's own pages,
    or from a client that is not a browser page (no Origin header)."""
    if scope.get("method") in ("GET", "HEAD", "OPTIONS"):
        return True
    origin = _header(scope, b"origin")
    if origin is None:
        return True
    host = _header(scope, b"host") or ""
    return origin.split("://", 1)[-1].rstrip("/").lower() == host.lower()


def _wants_html(scope: Scope) -> bool:
    accept = (_header(scope, b"accept") or "").lower()
    return "text/html" in accept


class Gate:
    """The ASGI middleware that lets a request in, or answers it with one line (401, 400)."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.key = key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not _same_origin(scope):
            response = error_response(403, "a page of another site sent this request (its Origin is not this "
                                           "server's); ask from this server's own pages, or without an Origin header")
            await response(scope, receive, send)
            return
        if not self.key:
            host = _host_name(_header(scope, b"host") or "")
            if host and not is_loopback(host):
                response = error_response(400, f"Host {host[:80]!r} is not a loopback name: without REWIND_API_KEY "
                                               "this server answers requests to localhost or 127.0.0.1 only")
                await response(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        given, where = given_key(scope)
        if given is None or not hmac.compare_digest(given.encode(), self.key):
            line = ("this server needs REWIND_API_KEY: send it as `x-api-key: KEY` or `Authorization: Bearer KEY` "
                    "(a browser: ?api_key=KEY once)") if given is None else "the API key is not this server's"
            response = error_response(401, line, headers={"WWW-Authenticate": 'Bearer realm="rewind"'})
            await response(scope, receive, send)
            return
        if where == "query" and scope.get("method") == "GET" and _wants_html(scope):
            await self._to_cookie(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _to_cookie(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A page opened with ?api_key=: the key as a cookie, the same address without it."""
        from starlette.responses import RedirectResponse

        rest = without_key(scope.get("query_string", b""))
        location = scope.get("root_path", "") + scope["path"] + (f"?{rest}" if rest else "")
        response = RedirectResponse(location, status_code=303)
        secure = scope.get("scheme") == "https"
        response.set_cookie(KEY_COOKIE, self.key.decode(), httponly=True, samesite="strict", path="/", secure=secure)
        await response(scope, receive, send)


__all__ = ["Gate", "KEY_COOKIE", "KEY_HEADER", "KEY_PARAM", "check_bind", "check_key", "given_key", "is_loopback",
           "without_key"]
