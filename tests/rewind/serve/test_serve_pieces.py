"""The pieces of `rewind serve` that need no server: who may talk to it, where it may
listen, how a request finds its endpoint, and a document that says every route it serves."""

from __future__ import annotations

import pytest
from starlette.routing import Route

from rewind.cli.commands import serving
from rewind.serve import server
from rewind.serve.app import GROUPS, chosen, starlette_routes
from rewind.serve.auth import check_bind, given_key, is_loopback, without_key
from rewind.serve.docs import docs_page, openapi_document
from workflows.vocabulary.errors import ConfigError


def test_the_command_line_says_the_servers_defaults() -> None:
    # Spelled out in the CLI module, so `rewind --help` imports no web framework.
    assert (serving.DEFAULT_HOST, serving.DEFAULT_PORT) == (server.DEFAULT_HOST, server.DEFAULT_PORT)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost", "LOCALHOST", "app.localhost"])
def test_loopback_names(host: str) -> None:
    assert is_loopback(host)
    check_bind(host, "")  # no key needed


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "example.com", "localhost.example.com", ""])
def test_beyond_loopback_needs_a_key(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(ConfigError, match="REWIND_API_KEY"):
        check_bind(host, "")
    check_bind(host, "a-key")


@pytest.mark.parametrize("key", ["has space", "tab\there", "é-accent", "line\nbreak"])
def test_a_key_a_header_cannot_carry_is_refused(key: str) -> None:
    with pytest.raises(ConfigError, match="printable ASCII"):
        check_bind("127.0.0.1", key)


def _scope(headers: dict[str, str], query: str = "") -> dict:
    return {"type": "http", "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
            "query_string": query.encode()}


def test_where_a_request_carries_the_key() -> None:
    assert given_key(_scope({"x-api-key": "k1"})) == ("k1", "header")
    assert given_key(_scope({"authorization": "Bearer k2"})) == ("k2", "bearer")
    assert given_key(_scope({"authorization": "Basic abc"})) == (None, "")
    assert given_key(_scope({"cookie": "a=b; rewind_api_key=k3"})) == ("k3", "cookie")
    assert given_key(_scope({"cookie": "\x00garbage;;=="})) == (None, "")
    assert given_key(_scope({}, "branch=main&api_key=k4")) == ("k4", "query")
    assert given_key(_scope({"x-api-key": "k1"}, "api_key=k4")) == ("k1", "header")  # a header wins
    assert without_key(b"api_key=secret&branch=b&after=4.2") == "branch=b&after=4.2"


def test_the_accept_header_picks_the_page_or_the_json() -> None:
    endpoints = [e for g in GROUPS for e in g.endpoints if e.method == "GET" and e.path == "/runs/{run}"]
    assert sorted(e.accepts for e in endpoints) == ["application/json", "text/html"]
    browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    assert chosen(endpoints, browser).accepts == "text/html"
    for accept in ("", "*/*", "application/json", "text/event-stream"):
        assert chosen(endpoints, accept).accepts == "application/json"


def test_the_document_says_every_route_served() -> None:
    routes = {(method, r.path) for r in starlette_routes(GROUPS, None) if isinstance(r, Route)  # type: ignore[arg-type]
              for method in r.methods or () if method != "HEAD"}
    document = openapi_document(GROUPS)
    documented = {(method.upper(), path) for path, ops in document["paths"].items() for method in ops}
    assert routes == documented
    for path, ops in document["paths"].items():
        for op in ops.values():
            assert op["summary"] and op["responses"], (path, op)
            for status, answer in op["responses"].items():
                for content in (answer.get("content") or {}).values():
                    ref = content["schema"].get("$ref")
                    assert ref is None or ref.rsplit("/", 1)[-1] in document["components"]["schemas"], (path, status)
    page = docs_page(document)
    assert page.count("<section class=op") == len(documented)
    assert "<script" not in page and "http://" not in page and "https://" not in page
