"""Every argument of every command says what it does: in `--help` and in docs/cli.md."""

from __future__ import annotations

import argparse

from rewind.cli.main import build_parser
from rewind.cli.reference import DEFAULT_PATH, _subcommands

_NOT_ARGUMENTS = (argparse._HelpAction, argparse._SubParsersAction, argparse._VersionAction)


def _unexplained(path: str, parser: argparse.ArgumentParser) -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, _NOT_ARGUMENTS) or action.help == argparse.SUPPRESS:
            continue
        if not (action.help or "").strip():
            found.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    for name, help_text, sub in _subcommands(parser):
        if not help_text.strip():
            found.append(f"{path} {name} (the command itself)")
        found += _unexplained(f"{path} {name}", sub)
    return found


def test_every_option_of_every_command_has_help_text():
    missing = _unexplained("rewind", build_parser())
    assert not missing, "arguments without help text (add help=...): " + ", ".join(missing)


def test_the_command_reference_has_no_empty_row():
    empty = [line for line in DEFAULT_PATH.read_text().splitlines() if line.startswith("| ") and line.endswith("|  |")]
    assert not empty, f"docs/cli.md rows that say nothing: {empty}"
