"""JSON labwright did not write enters through one parser (labwright.textio.loads_json), whose failures are all a
JSONDecodeError: the CLI sweep at 2b91fd1 met a RecursionError (nesting) and a bare ValueError (a 5,000-digit number)
escaping three call sites that parsed with json.loads and caught only JSONDecodeError or ValueError."""

from __future__ import annotations

import ast
import contextlib
import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import labwright
from labwright.textio import loads_json

SRC = Path(labwright.__file__).parent
#: Modules that run somewhere else, with only the standard library (their own parsing is guarded where they read).
ELSEWHERE = ("agent/", "guestlock.py", "models/fetch.py", "matrix/abi_import.py", "textio.py")


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def test_no_module_of_labwrights_own_process_parses_json_by_hand():
    # the code itself (AST), not the scripts it ships as strings (they run elsewhere, with the standard library)
    bare = [f"{path.relative_to(SRC)}:{call.lineno}" for path in sorted(SRC.rglob("*.py"))
            if not path.relative_to(SRC).as_posix().startswith(ELSEWHERE)
            for call in _calls(ast.parse(path.read_text()))
            if isinstance(call.func, ast.Attribute) and call.func.attr in ("loads", "load")
            and isinstance(call.func.value, ast.Name) and call.func.value.id == "json"]
    assert not bare, f"parse with labwright.textio.loads_json/load_json instead: {bare}"


def test_no_script_shipped_as_a_string_calls_labwrights_parser():
    """A script sent to a guest as source (python3 -c ..., an embedded probe) has only the standard library: the
    rewrite that made the rule above first also rewrote four such scripts (lxd/session.py AGENT_SOURCE,
    gpu/check.py, openwebui/config.py, two verify suites), which a unit test of the LXD agent caught."""
    shipped = [f"{path.relative_to(SRC)}:{node.lineno}" for path in sorted(SRC.rglob("*.py"))
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import" in node.value
               and re.search(r"\bloads?_json\(", node.value)]
    assert not shipped, shipped


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000,
                                  "9" * 5000, '{"n": ' + "1" * 4301 + "}", b"\xff\xfe[", "", "nan]"])
def test_every_way_the_parser_fails_is_a_decode_error(text):
    with pytest.raises(json.JSONDecodeError):
        loads_json(text)


@given(st.text(max_size=60) | st.binary(max_size=60))
def test_any_input_is_a_document_or_a_decode_error(text):
    with contextlib.suppress(json.JSONDecodeError):   # also bytes not UTF-8/16/32 (json's UnicodeDecodeError)
        loads_json(text)
