"""GET /openapi.json and GET /docs: what `rewind serve` serves, written from its routes.

The document is made from the same data the routes are (rewind/serve/routes.py): every
group's endpoints, their parameters, their bodies' pydantic models as JSON Schema, their
answers. /docs shows it as one HTML page drawn on the server: no script, nothing loaded
from anywhere (its Content-Security-Policy allows nothing but its own inline style).
"""

from __future__ import annotations

import html
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from rewind import __version__
from rewind.serve.backends import Backends
from rewind.serve.routes import Answer, Endpoint, Group

OPENAPI_VERSION = "3.1.0"
_REF = "#/components/schemas/{model}"


def _schema(model: type[BaseModel] | dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """A model as a reference into `components` (filled with it and what it refers to); a dict as itself."""
    if isinstance(model, dict):
        return model
    schema = model.model_json_schema(ref_template=_REF)
    components.update(schema.pop("$defs", {}))
    components[model.__name__] = schema
    return {"$ref": _REF.format(model=model.__name__)}


def _answer(answer: Answer, components: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"description": answer.description}
    if answer.model is not None:
        out["content"] = {answer.media_type: {"schema": _schema(answer.model, components)}}
    return out


def _operation(endpoint: Endpoint, tag: str, components: dict[str, Any], html_too: bool) -> dict[str, Any]:
    operation: dict[str, Any] = {"tags": [tag], "summary": endpoint.summary}
    if endpoint.description:
        operation["description"] = endpoint.description
    if endpoint.operation_id:
        operation["operationId"] = endpoint.operation_id
    if endpoint.params:
        operation["parameters"] = [{"name": p.name, "in": p.where, "required": p.required or p.where == "path",
                                    "description": p.description, "schema": p.schema} for p in endpoint.params]
    if endpoint.body_model is not None:
        operation["requestBody"] = {"required": True, "content": {
            "application/json": {"schema": _schema(endpoint.body_model, components)}}}
    operation["responses"] = {str(a.status): _answer(a, components) for a in endpoint.answers}
    if html_too:  # the same route answers a browser with a page
        ok = operation["responses"].setdefault("200", {"description": "OK"})
        ok.setdefault("content", {})["text/html"] = {"schema": {"type": "string"}}
    return operation


def openapi_document(groups: tuple[Group, ...]) -> dict[str, Any]:
    """The OpenAPI document of `groups`' routes."""
    components: dict[str, Any] = {}
    paths: dict[str, dict[str, Any]] = {}
    pages = {(e.method, g.prefix + e.path) for g in groups for e in g.endpoints if e.accepts == "text/html"}
    for group in groups:
        for endpoint in group.endpoints:
            path = group.prefix + endpoint.path
            key = endpoint.method.lower()
            if endpoint.accepts == "text/html" and key in paths.get(path, {}):
                continue  # said as the JSON endpoint's other content type
            html_too = endpoint.accepts != "text/html" and (endpoint.method, path) in pages
            paths.setdefault(path, {})[key] = _operation(endpoint, group.tag, components, html_too)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "Rewind", "version": __version__,
                 "description": "Durable, forkable LLM agent runs on Temporal: `rewind serve`, the HTTP face. With "
                                "REWIND_API_KEY set, every request carries it as `x-api-key` or `Authorization: "
                                "Bearer` (a browser: `?api_key=` once)."},
        "tags": [{"name": g.tag, "description": g.description} for g in groups],
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {"apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
                                "bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"apiKey": []}, {"bearer": []}, {}],
    }


async def openapi_route(request: Request, _backends: Backends, _body: Any) -> Response:
    return JSONResponse(openapi_document(request.app.state.groups))


# -- the page -------------------------------------------------------------------------------
_STYLE = """
body { margin: 0; font: 14px/1.45 system-ui, sans-serif; color: #1d2330; background: #f6f7f9; }
header { padding: 12px 20px; background: #1d2330; color: #fff; }
header h1 { margin: 0; font-size: 18px; }
main { padding: 12px 20px 40px; max-width: 1100px; }
section.op { background: #fff; border: 1px solid #d9dde5; border-radius: 8px; padding: 8px 14px; margin: 10px 0; }
h2 { font-size: 16px; margin: 22px 0 4px; }
h3 { font-size: 14px; margin: 0; display: flex; gap: 10px; align-items: baseline; }
.method { font: 600 12px ui-monospace, monospace; padding: 1px 6px; border-radius: 4px; background: #e3ecfb; }
.method.post { background: #dff3e7; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12.5px; }
table { border-collapse: collapse; width: 100%; margin: 6px 0; }
th, td { text-align: left; padding: 3px 6px; border-bottom: 1px solid #eef0f3; vertical-align: top; }
th { color: #6b7280; font-weight: normal; }
.muted { color: #6b7280; }
"""


def _type(schema: Any, components: dict[str, Any]) -> str:
    if not isinstance(schema, dict):  # JSON Schema's `true`: anything
        return "any"
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " | ".join(_type(s, components) for s in schema["anyOf"])
    if "enum" in schema:
        return " | ".join(str(v) for v in schema["enum"])
    if schema.get("type") == "array":
        return f"list of {_type(schema.get('items', {}), components)}"
    if schema.get("type") == "object" and "additionalProperties" in schema:
        return f"object of {_type(schema['additionalProperties'] or {}, components)}"
    return str(schema.get("type", "any"))


def _fields(ref: dict[str, Any], components: dict[str, Any]) -> str:
    model = components.get(ref.get("$ref", "").rsplit("/", 1)[-1], ref)
    rows = []
    required = set(model.get("required", []))
    for name, prop in (model.get("properties") or {}).items():
        rows.append(f"<tr><td><code>{html.escape(name)}</code>{' (required)' if name in required else ''}</td>"
                    f"<td class=mono>{html.escape(_type(prop, components))}</td>"
                    f"<td>{html.escape(prop.get('description', ''))}</td></tr>")
    return "<table><tr><th>field</th><th>type</th><th></th></tr>" + "".join(rows) + "</table>" if rows else ""


def docs_page(document: dict[str, Any]) -> str:
    components = document["components"]["schemas"]
    parts = [f"<p>{html.escape(document['info']['description'])} The document itself: "
             "<a href=\"/openapi.json\"><code>/openapi.json</code></a>.</p>"]
    for tag in document["tags"]:
        parts.append(f"<h2>{html.escape(tag['name'])}</h2><p class=muted>{html.escape(tag['description'])}</p>")
        for path, operations in document["paths"].items():
            for method, op in operations.items():
                if tag["name"] not in op.get("tags", []):
                    continue
                parts.append(f"<section class=op id=\"{html.escape(op.get('operationId', ''))}\"><h3>"
                             f"<span class=\"method {method}\">{method.upper()}</span><code>{html.escape(path)}</code>"
                             f"<span>{html.escape(op['summary'])}</span></h3>")
                if op.get("description"):
                    parts.append(f"<p>{html.escape(op['description'])}</p>")
                params = op.get("parameters") or []
                if params:
                    parts.append("<table><tr><th>parameter</th><th>in</th><th></th></tr>" + "".join(
                        f"<tr><td><code>{html.escape(p['name'])}</code></td><td>{p['in']}</td>"
                        f"<td>{html.escape(p['description'])}</td></tr>" for p in params) + "</table>")
                body = op.get("requestBody")
                if body:
                    schema = body["content"]["application/json"]["schema"]
                    parts.append(f"<p>JSON body: <code>{html.escape(_type(schema, components))}</code></p>"
                                 + _fields(schema, components))
                answers = "".join(f"<tr><td>{status}</td><td>{html.escape(a['description'])}</td><td class=mono>"
                                  + html.escape(", ".join(f"{media}: {_type(c.get('schema', {}), components)}"
                                                          for media, c in (a.get("content") or {}).items()))
                                  + "</td></tr>" for status, a in op["responses"].items())
                parts.append(f"<table><tr><th>answer</th><th></th><th></th></tr>{answers}</table></section>")
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>rewind serve: routes</title><style>{_STYLE}</style></head><body><header><h1>rewind serve "
            f"{html.escape(document['info']['version'])}: routes</h1></header><main>{''.join(parts)}</main></body></html>")


async def docs_route(request: Request, _backends: Backends, _body: Any) -> Response:
    return HTMLResponse(docs_page(openapi_document(request.app.state.groups)),
                        headers={"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"})


GROUP = Group(
    tag="docs", description="This document, and a page that shows it",
    endpoints=(
        Endpoint("GET", "/openapi.json", openapi_route, "The OpenAPI document of every route",
                 answers=(Answer(200, "the OpenAPI 3.1 document", {"type": "object"}),), operation_id="openapi"),
        Endpoint("GET", "/docs", docs_route, "The OpenAPI document as a page (no script, nothing loaded)",
                 answers=(Answer(200, "the page", {"type": "string"}, "text/html"),), accepts="application/json",
                 operation_id="docs"),
    ),
)

__all__ = ["GROUP", "docs_page", "openapi_document"]
