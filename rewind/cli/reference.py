"""docs/cli.md, written from the argument parser itself, so the reference cannot
drift from what `rewind` accepts (a test regenerates it and compares).

    python -m rewind.cli.reference            # rewrite docs/cli.md
    python -m rewind.cli.reference --check    # exit 1 when docs/cli.md is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
REGENERATE = "python -m rewind.cli.reference"

_HEADER = f"""# Command reference

Every `rewind` command and its options, generated from the argument parser
(`{REGENERATE}` rewrites this file; a test fails when it is out of date).
Every command also takes `--json` (one JSON document on stdout); errors are one
line on stderr and exit 1 (a bad argument: 2). Back to the [README](../README.md).
"""


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, in the order they were added."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            found += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return found


def _option_row(action: argparse.Action) -> str | None:
    if (isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.dest == "json"
            or action.help == argparse.SUPPRESS):
        return None
    if action.option_strings:
        names = ", ".join(f"`{o}`" for o in action.option_strings)
        if action.nargs != 0:
            names += f" `{action.metavar or action.dest.upper()}`"
    else:
        names = f"`{action.metavar or action.dest.upper()}`"
    text = " ".join((action.help or "").split()).replace("|", "\\|")
    if action.choices and not isinstance(action.choices, dict):
        text += (" " if text else "") + "(one of " + ", ".join(f"`{c}`" for c in action.choices) + ")"
    if action.required and action.option_strings:
        text += " (required)"
    if action.default not in (None, False, argparse.SUPPRESS, []) and action.option_strings and "default" not in text:
        text += f" (default `{action.default}`)"
    if isinstance(action, argparse._AppendAction):
        text += " (repeatable)"
    return f"| {names.replace('|', chr(92) + '|')} | {text} |"


def _section(path: str, help_text: str, parser: argparse.ArgumentParser, out: list[str]) -> None:
    subs = _subcommands(parser)
    out += [f"## `{path}`", ""]
    if help_text:
        out += [help_text[0].upper() + help_text[1:] + ".", ""]
    usage = " ".join(parser.format_usage().removeprefix("usage: ").split())
    out += ["```", usage, "```", ""]
    rows = [row for action in parser._actions if (row := _option_row(action))]
    if rows:
        out += ["| argument | what it does |", "|---|---|", *rows, ""]
    for name, sub_help, sub in subs:
        _section(f"{path} {name}", sub_help, sub, out)


def cli_reference() -> str:
    from rewind.cli.main import build_parser

    parser = build_parser()
    out = [_HEADER]
    for name, help_text, sub in _subcommands(parser):
        _section(f"rewind {name}", help_text, sub, out)
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(prog="python -m rewind.cli.reference", description=__doc__.splitlines()[0])
    args.add_argument("--check", action="store_true", help="exit 1 when the file is out of date")
    args.add_argument("--out", type=Path, default=DEFAULT_PATH)
    options = args.parse_args(argv)
    text = cli_reference()
    if options.check:
        current = options.out.read_text() if options.out.exists() else ""
        if current != text:
            print(f"{options.out} is out of date: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    options.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
