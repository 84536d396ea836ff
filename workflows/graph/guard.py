"""Which nodes of a graph run as workflow code and which as one activity each, and the guard
that tells a node's I/O before it happens.

A node runs in one of two ways (docs/langgraph.md, "Nodes that do their own I/O"):

- **calls** (call-level durability): the node's code is workflow code; each of its
  `ChatOpenAI` and LangChain tool calls is an activity of its own. A crash inside the node
  repeats none of its calls; a fork answers each call from the record.
- **node** (node-level durability): the whole node is one activity, run on the worker's own
  import of the module, as Temporal's LangGraph plugin runs every node. A crash inside it
  runs the node again from its start; a fork answers the whole node from the record. Its
  model calls (any LangChain chat model) are still counted, per call, in the run's ledger.

The default, **auto**, needs nothing declared: a node starts as workflow code, and the first
thing it does that workflow code must not do (open a file or a database, reach the network,
read the clock, call a model other than an OpenAI-compatible one through Rewind, call a model
or tool synchronously) stops it *before* that happens (`NodeNeedsActivity`); the node then
runs again, from its start, as one activity, its calls so far answered with what they
returned. The same code stops at the same point on every replay, so the choice needs no
record of its own; once a node has needed an activity the run sends it there directly.

`rewind_node_options`, a module-level mapping next to the graph, declares a node's way
(`{"load_rows": {"durability": "node"}}`) and its activity's `timeout_s` / `max_attempts`.

The guard is a Python audit hook (PEP 578, installed once per process) that acts only while
a call-level node's code runs in a graph run's workflow (a context variable says which node):
`sqlite3.connect`, `socket.connect`, `open`, `subprocess.Popen` and their like, which the
workflow sandbox does not see when a library the node calls makes them. Everywhere else (the
activities, the worker's own work, other threads) the hook returns at once.
"""

from __future__ import annotations

import sys
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from workflows.vocabulary.errors import ToolRegistryError

# The module attribute that declares nodes' (and @tasks') durability.
NODE_OPTIONS = "rewind_node_options"
DURABILITIES = ("auto", "calls", "node")
_OPTION_KEYS = {"durability", "timeout_s", "max_attempts"}


class NodeNeedsActivity(BaseException):
    """A call-level node is about to do I/O: it runs again as one activity. A BaseException, so
    the node's own `except Exception` does not swallow it (a node that swallows it anyway is
    caught after it returns: `NodeGuard.tripped`)."""

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(f"node {node!r} {reason}")
        self.node, self.reason = node, reason


@dataclass
class NodeGuard:
    """One call-level attempt of a node: its name, the calls it made (handed to its activity if
    it needs one) and what stopped it, if anything did."""

    node: str
    calls: list[tuple[tuple[str, str, str], Any]] = field(default_factory=list)
    tripped: str | None = None

    def stop(self, reason: str) -> NodeNeedsActivity:
        if self.tripped is None:
            self.tripped = reason
        return NodeNeedsActivity(self.node, reason)


# The call-level node whose code runs here (None: not inside one).
_GUARD: ContextVar[NodeGuard | None] = ContextVar("rewind_node_guard", default=None)
_hooked = False

# Audit events that are I/O (or a clock that blocks the workflow): a call-level node that
# raises one runs as an activity instead. Prefixes end with a dot.
_IO_EVENTS = frozenset({
    "open", "sqlite3.connect", "socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.bind",
    "socket.sendto", "subprocess.Popen", "os.system", "os.posix_spawn", "os.fork", "os.listdir", "os.scandir",
    "os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.truncate", "os.chmod", "os.utime", "os.putenv",
    "os.unsetenv", "os.chdir", "glob.glob", "urllib.Request", "http.client.connect", "time.sleep",
    "ftplib.connect", "smtplib.connect", "poplib.connect", "imaplib.open", "webbrowser.open",
})
_IO_PREFIXES = ("os.exec", "os.spawn", "shutil.", "ctypes.dlopen")
# Frames of the import machinery: a module imported inside a node opens its own files.
_IMPORT_FRAMES = ("<frozen importlib", "importlib/", "workflow_sandbox/_importer")


def _audit(event: str, args: tuple[Any, ...]) -> None:
    guard = _GUARD.get()
    if guard is None:
        return
    if event not in _IO_EVENTS and not event.startswith(_IO_PREFIXES):
        return
    if event in _READS and _installed_file(args):
        return  # a library reading its own installed files (data, lazily loaded modules)
    if _importing():
        return
    what = event if not args else f"{event}({_shown(args[0])})"
    raise guard.stop(f"does I/O itself ({what})")


_READS = frozenset({"open", "os.listdir", "os.scandir", "glob.glob"})
_INSTALLED = tuple(sorted({p for p in (sys.prefix, sys.base_prefix, sys.exec_prefix) if p}))


def _installed_file(args: tuple[Any, ...]) -> bool:
    """A read of a file of the Python installation (its standard library, site-packages)."""
    if not args or not isinstance(args[0], (str, bytes)):
        return False
    path = args[0].decode(errors="replace") if isinstance(args[0], bytes) else args[0]
    mode = args[1] if len(args) > 1 and isinstance(args[1], str) else "r"
    return path.startswith(_INSTALLED) and not any(c in mode for c in "wax+")


def _importing() -> bool:
    frame = sys._getframe(2)
    for _ in range(40):
        if frame is None:
            return False
        if frame.f_code.co_filename.startswith(_IMPORT_FRAMES[0]) or any(
                part in frame.f_code.co_filename for part in _IMPORT_FRAMES[1:]):
            return True
        frame = frame.f_back
    return False


def _shown(value: Any) -> str:
    text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def install_guard() -> None:
    """The audit hook, once per process (a hook cannot be removed: it costs one context
    variable lookup per audited event outside a guarded node)."""
    global _hooked
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked = True


def guarding(node: str) -> tuple[NodeGuard, Any]:
    """Guard a call-level attempt of `node` from here (reset with `unguard(token)`)."""
    guard = NodeGuard(node)
    return guard, _GUARD.set(guard)


def unguard(token: Any) -> None:
    _GUARD.reset(token)


def current_guard() -> NodeGuard | None:
    return _GUARD.get()


class unguarded:
    """Rewind's own workflow code in a node's call (routing a model or tool call) runs unguarded."""

    def __enter__(self) -> None:
        self._token = _GUARD.set(None)

    def __exit__(self, *exc: object) -> None:
        _GUARD.reset(self._token)


@dataclass(frozen=True)
class NodeOptions:
    """A node's (or @task's) declared way of running, and its activity's limits."""

    durability: str = "auto"
    timeout_s: float = 600.0
    max_attempts: int = 5  # attempts after a worker crash or a timeout (the node's own errors are LangGraph's)


def node_options(module: Any, module_name: str, names: list[str] | None = None) -> dict[str, NodeOptions]:
    """The module's `rewind_node_options`, checked (against the nodes and tasks of all its
    graphs, `names`, when given: as the worker starts); raises ToolRegistryError naming what is wrong."""
    declared = getattr(module, NODE_OPTIONS, None) or {}
    where = f"{module_name}.{NODE_OPTIONS}"
    if not isinstance(declared, dict):
        raise ToolRegistryError(f"{where} must be a dict: node name -> options "
                                "(e.g. {'load_rows': {'durability': 'node'}})")
    unknown = sorted(set(declared) - set(names)) if names is not None else []
    if unknown:
        raise ToolRegistryError(f"{where} names {', '.join(map(str, unknown))}, which is not a node or @task of the "
                                f"module's graphs (they are: {', '.join(sorted(names)) or 'none'})")
    out = {}
    for name, given in declared.items():
        if not isinstance(given, dict) or set(given) - _OPTION_KEYS:
            raise ToolRegistryError(f"{where}[{name!r}] must be a dict of {', '.join(sorted(_OPTION_KEYS))}")
        durability = given.get("durability", "auto")
        if durability not in DURABILITIES:
            raise ToolRegistryError(f"{where}[{name!r}]['durability'] is {durability!r}: "
                                    f"one of {', '.join(DURABILITIES)}")
        try:
            out[name] = NodeOptions(durability=durability, timeout_s=float(given.get("timeout_s", 600.0)),
                                    max_attempts=int(given.get("max_attempts", 5)))
        except (TypeError, ValueError) as exc:
            raise ToolRegistryError(f"{where}[{name!r}]: {exc}") from None
    return out


__all__ = ["NODE_OPTIONS", "DURABILITIES", "NodeNeedsActivity", "NodeGuard", "NodeOptions", "install_guard",
           "guarding", "unguard", "unguarded", "current_guard", "node_options"]
