"""A tools/call result as a Rewind tool output.

    isError                the tool's error (a ToolError: the model sees it as a tool error)
    text only              the text, joined
    structuredContent      the structured value (the text content is its rendering)
    image / audio / blob   stored once in the payload store, by reference: the output
                           names it (`ref`, type, size) and the model reads a description,
                           never the bytes (history and the transcript stay small)
    resource link          its URI, name and type, as text

Large outputs then follow the usual path (activities/tools/runner.py: by reference
when read-only, the size limit for all).
"""

from __future__ import annotations

import base64
from typing import Any

from workflows.vocabulary.errors import ToolError

_EMBEDDED_TEXT_MAX = 64 * 1024  # a text resource up to this size is inlined; larger ones are stored


async def tool_output(result: Any, qualified: str, outputs: Any) -> Any:
    """The output of `result` (mcp.types.CallToolResult) for tool `qualified`; `outputs` is the
    payload store's OutputStore (None: binary content is described, not kept)."""
    texts: list[str] = []
    attachments: list[dict[str, Any]] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            texts.append(block.text)
        elif kind in ("image", "audio"):
            attachments.append(await _stored(outputs, kind, block.mime_type, block.data, None))
        elif kind == "resource":
            res = block.resource
            text = getattr(res, "text", None)
            if text is not None and len(text) <= _EMBEDDED_TEXT_MAX:
                texts.append(f"[resource {res.uri}]\n{text}")
            elif text is not None:
                attachments.append(await _stored(outputs, "resource", res.mime_type,
                                                 base64.b64encode(text.encode()).decode(), str(res.uri)))
            else:
                attachments.append(await _stored(outputs, "resource", res.mime_type, res.blob, str(res.uri)))
        elif kind == "resource_link":
            what = " ".join(p for p in (block.name, f"({block.mime_type})" if block.mime_type else "") if p)
            texts.append(f"[resource link {block.uri}{' ' + what if what else ''}]")
        else:
            texts.append(f"[{kind or 'unknown'} content, not shown]")
    text = "\n".join(texts)
    if result.is_error:
        raise ToolError(text or "the server reported an error without a message")
    structured = getattr(result, "structured_content", None)
    if attachments:
        described = "; ".join(a["description"] for a in attachments)
        out: dict[str, Any] = {"text": f"{text}\n{described}".strip(), "attachments": attachments}
        if structured is not None:
            out["structured"] = structured
        return out
    if structured is not None:
        return structured
    return text


async def _stored(outputs: Any, kind: str, mime: str | None, data: str, uri: str | None) -> dict[str, Any]:
    try:
        size = len(base64.b64decode(data, validate=False))
    except (ValueError, TypeError):
        size = len(data)
    entry: dict[str, Any] = {"type": kind, "mimeType": mime or "application/octet-stream", "bytes": size}
    if uri:
        entry["uri"] = uri
    name = f"{kind} {uri}" if uri else kind
    if outputs is not None:
        entry["ref"] = await outputs.put({"type": kind, "mimeType": entry["mimeType"], "data": data,
                                          **({"uri": uri} if uri else {})})
        entry["description"] = (f"[{name}, {entry['mimeType']}, {size} bytes, stored in the payload store as "
                                f"{entry['ref'][:12]}]")
    else:
        entry["description"] = f"[{name}, {entry['mimeType']}, {size} bytes, not kept]"
    return entry


__all__ = ["tool_output"]
