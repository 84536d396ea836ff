"""The docs a new user reads: a short README, guides it links to that exist, and a
command reference generated from the parser that is never out of date."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_the_readme_is_a_front_page():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move the detail into a guide under docs/"


def test_every_relative_link_of_the_docs_points_at_a_file():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert not broken, f"links to missing files: {broken}"


def test_every_guide_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text()
    unlinked = [p.name for p in PAGES[1:] if f"(docs/{p.name})" not in readme]
    assert not unlinked, f"guides the README does not link: {unlinked}"


def test_the_command_reference_is_up_to_date():
    from rewind.cli.reference import DEFAULT_PATH, REGENERATE, cli_reference

    assert DEFAULT_PATH.read_text() == cli_reference(), f"docs/cli.md is out of date: run `{REGENERATE}`"


def test_the_command_reference_names_every_command_and_option():
    from rewind.cli.main import build_parser
    from rewind.cli.reference import _subcommands

    text = (REPO / "docs" / "cli.md").read_text()
    for name, _, sub in _subcommands(build_parser()):
        assert f"## `rewind {name}`" in text, name
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help") and action.help != "==SUPPRESS==":
                    assert f"`{option}`" in text, (name, option)
