"""The `rewind` command line: a thin shell over the Python API.

The commands live in rewind/cli/commands/, one module per group (running, runs,
checkpoints, branches, experiments, approvals, erasure, processes, watching, serving), with what
they share in common.py and the argument types in arguments.py. Each group
imports what a command needs inside the command, so a process loads only
what the command it runs uses.

Errors: non-zero exit and one clear line on stderr, never a traceback (any
exception, ours or a library's, ends as one line; REWIND_DEBUG=1 adds the
traceback). Every command takes `--json` and then prints one JSON document on
stdout. Every id a command takes is validated before it is used.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import traceback
from typing import Any, Awaitable, Callable

from rewind.cli.commands import (
    approvals,
    branches,
    checkpoints,
    erasure,
    experiments,
    processes,
    resuming,
    running,
    runs,
    serving,
    tools,
    watching,
)
from rewind.cli.commands.common import EXIT_ERROR, EXIT_USAGE, one_line
from rewind.settings.config import Settings, drop_empty_library_variables, skip_pydantic_plugins
from rewind.temporal.runtime import quiet_core_logs
from workflows.vocabulary.errors import RewindError, UsageError

# The commands that run user code (tools, and the pydantic plugins they may rely on).
RUNS_USER_CODE = frozenset({"worker", "dev", "demo"})
# The groups in the order `rewind --help` lists their commands.
GROUPS = (processes, running, watching, serving, runs, checkpoints, branches, resuming, experiments, erasure, approvals, tools)


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (`rewind start: argument --max-steps: ...`)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        print(f"{self.prog}: {one_line(message)} (see {self.prog} --help)", file=sys.stderr)
        sys.stderr.flush()
        os._exit(EXIT_USAGE)


class _Unused:
    """The parser of a command that is not being run: its arguments are not added."""

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        return None


def build_parser() -> argparse.ArgumentParser:
    return _build_parser()[0]


def _build_parser(only: str | None = None) -> tuple[argparse.ArgumentParser, list[str]]:
    """The command line and the commands in it: all of them, or (`only`) that one alone
    if it is one, whose arguments it then parses as the whole command line does."""
    parser = _Parser(prog="rewind", description="Durable, forkable LLM agent runs on Temporal")
    parser.add_argument("--version", action="version", version=f"rewind {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    added: list[str] = []

    def command(name: str, help: str, json_help: str = "print one JSON document on stdout",
                **handler: Any) -> argparse.ArgumentParser:
        if only is not None and name != only:
            return _Unused()  # type: ignore[return-value]
        p = sub.add_parser(name, help=help)
        p.add_argument("--json", action="store_true", help=json_help)
        p.set_defaults(**handler)
        added.append(name)
        return p

    for group in GROUPS:
        group.register(command)
    return parser, added


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """Parse with the parser of the command named first alone: building all 27 commands'
    parsers, with their arguments and help texts, takes about 10 ms, one of them under 1 ms.
    Anything else (`--help`, `--version`, no command, an unknown one) gets the whole line."""
    words = _words(argv)
    if words and not words[0].startswith("-"):
        parser, added = _build_parser(only=words[0])
        if added:
            return parser.parse_args(argv)
    return build_parser().parse_args(argv)


def _words(argv: list[str] | None) -> list[str]:
    return sys.argv[1:] if argv is None else argv


def _version() -> str:
    # Not importlib.metadata: reading the installed distribution's metadata costs
    # more than the rest of `rewind --version` together.
    from rewind import __version__

    return __version__


def run(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code. Nothing but one line reaches stderr on failure."""
    drop_empty_library_variables()
    args = _parse(argv)
    if args.command not in RUNS_USER_CODE:
        skip_pydantic_plugins()
    debug = False
    try:
        # A command that only reads the store does not read the Temporal connection
        # (its profile file's loader would import the SDK's service client and its protobufs).
        settings = Settings.from_env(temporal=not getattr(args, "store_only", False))
        debug = settings.debug
        if args.command not in RUNS_USER_CODE and not (settings.tracing and settings.otel_protocol == "grpc"):
            _without_grpc()
        if not debug and args.command not in RUNS_USER_CODE:  # the worker logs them on stderr
            quiet_core_logs()
        if hasattr(args, "sync"):
            return args.sync(args, settings)
        handler: Callable[[argparse.Namespace, Settings], Awaitable[int]] = args.handler
        return asyncio.run(handler(args, settings))
    except RewindError as exc:
        print(f"rewind: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, UsageError) else EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`rewind show ... --json | head -1`): not an error.
        _silence_stdout()
        return 0
    except Exception as exc:  # noqa: BLE001 - no traceback reaches a user
        if _temporal_refused(exc):
            print(f"rewind: Temporal refused the request: {one_line(str(exc))}", file=sys.stderr)
            return 1
        if debug:
            traceback.print_exc()
        print(f"rewind: unexpected {type(exc).__name__}: {one_line(str(exc), 500)} "
              "(this is a bug; REWIND_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


def _without_grpc() -> None:
    """Make `import grpc` fail in this process, unless something imported it already.

    The Temporal SDK talks to the server through its Rust core, not gRPC's Python
    package; its `temporalio.api.*service.v1` packages import `grpc`, if installed, only
    to offer servicer stubs for Python gRPC servers (their `try: import grpc` says it is
    optional). Where grpcio is installed (with the OTLP gRPC exporter: the `otel` and
    `test` extras), that import cost `rewind status` and `rewind pending` ~30 ms of a
    ~400 ms process. A command that runs no user code and exports no spans over gRPC
    never uses it."""
    sys.modules.setdefault("grpc", None)  # type: ignore[arg-type]


def _temporal_refused(exc: Exception) -> bool:
    """Whether `exc` is the Temporal service's RPCError. Only a command that talked to
    Temporal can raise one, and only such a command has loaded the client: the others
    (--version, tree, show on a folder store) do not import it just to tell."""
    service = sys.modules.get("temporalio.service")
    return service is not None and isinstance(exc, service.RPCError)


def _silence_stdout() -> None:
    # Further writes (the final flush) to the closed pipe must not raise again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


# Commands that read and answer within seconds (users run them dozens of times a day, and
# in scripts), and `--version` / `--help`.
QUICK_READS = frozenset({"status", "pending", "tree", "show"})


def main(argv: list[str] | None = None) -> None:
    words = _words(argv)
    if not words or words[0].startswith("-") or words[0] in QUICK_READS:
        # No cycle collection in a process that ends in a moment: importing the Temporal
        # client's protobufs and building the pydantic models makes ~10^5 long-lived
        # objects, and the collector's full passes over them during the imports cost
        # `rewind status` ~10 ms of its ~350 (30-40 ms with it off before `rewind.cli.main`'s own
        # imports, which the console script cannot do). These commands make acyclic JSON, which
        # reference counting frees (checkpoint_bridge/checkpoints/chain.py pauses it the same way).
        # Here and not in `run`, which an application may call: only the console script's
        # own process, which ends with os._exit below.
        gc.disable()
    code = run(argv)
    from rewind.temporal.tracing import shutdown

    shutdown()  # export the command's spans (os._exit below skips every exit hook)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    sys.stderr.flush()
    # os._exit, not sys.exit: the Temporal client's native runtime threads can
    # call into Python while the interpreter finalizes and abort the process
    # (SIGABRT, "PyGILState_Release ... finalizing") after the work is done.
    os._exit(code)


if __name__ == "__main__":
    main()
