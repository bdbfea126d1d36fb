"""The `--json` shapes docs/cli.md documents, read back so that tests hold each command's real output to them.

docs/cli.md has a section per command (``### `labwright GROUP COMMAND` ``) whose inline code spans starting
with ``{`` are its JSON documents, in the order the prose gives them (``{...}``; "with `--dry` ``{...}``"). Only the
top-level keys are compared: the prose abbreviates what is nested. A document with ``...`` among its top-level keys
is open: the output must have every key it names, and may have more.
"""

from __future__ import annotations

import re
from pathlib import Path

CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
_SPAN = re.compile(r"`([^`]+)`")


def section(command: str) -> str:
    """The text of ``### `labwright COMMAND` `` up to the next heading."""
    text = CLI_DOC.read_text(encoding="utf-8")
    match = re.search(rf"^### `labwright {re.escape(command)}`\n(.*?)(?=^#)", text + "\n#", re.MULTILINE | re.DOTALL)
    assert match, f"docs/cli.md has no section for labwright {command}"
    return match.group(1)


def top_level_keys(document: str) -> tuple[set[str], bool]:
    """The quoted names at depth 1 of a documented ``{...}`` that stand where a key stands (after ``{`` or ``,``),
    and whether the document is open (``...`` at depth 1)."""
    keys, depth, last, i, is_open = set(), 0, "", 0, False
    while i < len(document):
        char = document[i]
        if char == '"':
            end = document.index('"', i + 1)
            if depth == 1 and last in ("{", ","):
                keys.add(document[i + 1:end])
            i, last = end + 1, '"'
            continue
        if depth == 1 and document.startswith("...", i) and last in ("{", ","):
            is_open, i, last = True, i + 3, "."
            continue
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
        if not char.isspace():
            last = char
        i += 1
    return keys, is_open


def documented_keys(command: str, variant: int = 0) -> tuple[set[str], bool]:
    """The top-level keys of the ``variant``-th JSON document docs/cli.md gives for ``labwright COMMAND``, and
    whether it is open."""
    documents = [span for span in _SPAN.findall(section(command)) if span.startswith("{")]
    assert len(documents) > variant, f"docs/cli.md documents {len(documents)} JSON shape(s) for labwright {command}"
    return top_level_keys(documents[variant])


def assert_documented(command: str, document: dict, variant: int = 0) -> None:
    """``document`` (a command's --json output) has exactly the top-level keys docs/cli.md gives it."""
    keys, is_open = documented_keys(command, variant)
    if is_open:
        assert keys <= set(document), f"labwright {command} --json lacks documented {sorted(keys - set(document))}"
    else:
        assert set(document) == keys, (f"labwright {command} --json has {sorted(document)}, docs/cli.md documents "
                                       f"{sorted(keys)}")
