"""The reader of docs/cli.md's --json shapes (tests/support/cli_docs.py), which the CLI tests hold output to."""

from __future__ import annotations

import pytest

from support.cli_docs import assert_documented, documented_keys, section, top_level_keys
from support.cli_walk import leaf_commands


def test_top_level_keys_skip_nested_keys_and_values():
    keys, is_open = top_level_keys('{"venv", "dry": false, "current": {"id", "stack"}, "previous": {...}|null, '
                                   '"status": "updated"|"unchanged", "removed": [path]}')
    assert (keys, is_open) == ({"venv", "dry", "current", "previous", "status", "removed"}, False)
    assert top_level_keys('{"node", "lead", "dry", ...}') == ({"node", "lead", "dry"}, True)


def test_the_documented_variants_are_read_in_order():
    assert documented_keys("stack switch")[0] == {"venv", "dry", "changed", "current", "previous", "removed",
                                                  "message"}
    assert documented_keys("stack switch", 1) == ({"venv", "stack", "dry", "plan"}, False)


def test_a_document_with_other_keys_or_missing_ones_fails():
    assert_documented("lab up", {"lab": "lw", "dry": False, "changes": []})
    with pytest.raises(AssertionError, match="docs/cli.md documents"):
        assert_documented("lab up", {"lab": "lw", "dry_run": False, "changes": []})
    assert_documented("cluster rejoin", {"node": "n", "lead": "l", "dry": True, "steps": [], "message": "",
                                         "changed": False})  # open: more keys allowed
    with pytest.raises(AssertionError, match="lacks documented"):
        assert_documented("cluster rejoin", {"node": "n"})


@pytest.mark.parametrize("path", [path for path, _ in leaf_commands() if path != "verify"])
def test_every_command_has_its_section(path):
    assert "--json" in section(path)
