"""Where a reader is in a branch's stream: the last durable event it got of each run it
merges (the branch itself and its sub-agents' and child pipelines' runs).

Its text form is what an SSE stream sends as each event's `id:` and a client sends back as
`Last-Event-ID` (or `after=`): the ids of those last events, comma-separated, a child's
prefixed with its path (`8.3,s3-call_1/4.2`). A plain event id is a cursor too (of the run
it names): a reader resumed from it gets every durable event after it, and every event of
a run it does not name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workflows.vocabulary.errors import InvalidIdError
from workflows.vocabulary.ids import parse_subagent_branch


@dataclass
class Cursor:
    """path ("" for the watched branch, `s3-call_1/s2-call_0` for a grandchild) -> (step, n)."""

    positions: dict[str, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> "Cursor":
        cursor = cls()
        if text is None or not text.strip():
            return cursor
        for part in text.strip().split(","):
            path, _, own = part.strip().rpartition("/")
            step, dot, n = own.partition(".")
            if not dot or not step.isdigit() or not n.isdigit() or any(c in path for c in " ~"):
                raise InvalidIdError(
                    f"{text!r} is not an event id or a stream cursor: give the id of a durable event (STEP.N, "
                    "e.g. 4.2, or PATH/STEP.N for a sub-agent's) or the `id:` an event stream sent")
            cursor.positions[path] = (int(step), int(n))
        return cursor

    def text(self) -> str:
        def key(item: tuple[str, tuple[int, int]]) -> tuple[int, str]:
            return (0 if not item[0] else 1, item[0])

        return ",".join(f"{path}/{step}.{n}" if path else f"{step}.{n}"
                        for path, (step, n) in sorted(self.positions.items(), key=key))


def relative_path(branch: str, watched: str) -> str | None:
    """`branch` seen from `watched`: "" for itself, `s3-call_1` for its sub-agent's run,
    `s3-call_1/s2-call_0` for that one's; None when it is not the watched branch's."""
    parts: list[str] = []
    current = branch
    while current != watched:
        parsed = parse_subagent_branch(current)
        if parsed is None:
            return None
        parent, step, call = parsed
        parts.append(f"s{step}-{call}")
        current = parent
    return "/".join(reversed(parts))


__all__ = ["Cursor", "relative_path"]
