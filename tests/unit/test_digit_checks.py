"""Digits in text labwright reads (tool output, server answers, files, data) are ASCII digits, and a run of them is
bounded. Python's own readers are wider: ``str.isdecimal()``, ``str.isdigit()`` and a ``str`` regex's ``\\d`` hold
for every script's digits ('\\u0661\\u0662' is 12 to int()), ``isdigit()`` also for superscripts int() refuses
('²'), and int() refuses a run of over 4,300 digits with a ValueError a parser may not expect (a fuzz of the tool
parsers at 77a5710: nvidia-smi's index '\\u0661' read as GPU 1, `Nodes: \\u0661` as one node). So:

* every digit check goes through ``labwright.textio.ascii_digits`` (ASCII, at most 40 digits); no module calls
  ``isdigit``/``isdecimal``/``isnumeric`` itself;
* every regular expression with ``\\d`` is ASCII (``(?a)`` at its start, or ``re.ASCII``), and no fragment of one
  carries ``\\d`` (written ``[0-9]``), so a pattern built from pieces cannot bring it back.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import labwright
from labwright.textio import MAX_DIGITS, ascii_digits

SRC = Path(labwright.__file__).parent
RE_CALLS = {"compile", "match", "search", "fullmatch", "findall", "finditer", "sub", "subn", "split"}


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        yield path, ast.parse(path.read_text())


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _ascii_flag(call: ast.Call) -> bool:
    flags = [kw.value for kw in call.keywords if kw.arg == "flags"] + call.args[2 if call.func.attr != "compile"
                                                                                else 1:]
    return any(re.search(r"\bre\.(ASCII|A)\b", ast.unparse(flag)) for flag in flags)


def test_no_module_checks_digits_by_hand():
    found = [f"{path.relative_to(SRC)}:{node.lineno}" for path, tree in _modules() for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and node.attr in ("isdigit", "isdecimal", "isnumeric")
             and path.name != "textio.py"]
    assert not found, f"use labwright.textio.ascii_digits (ASCII digits, bounded): {found}"


def test_every_pattern_with_a_digit_class_is_ascii():
    found = []
    for path, tree in _modules():
        docs = _docstrings(tree)
        patterns: dict[int, ast.Call] = {}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RE_CALLS
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re" and node.args):
                patterns[id(node.args[0])] = node
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and "\\d" in node.value):
                continue
            if id(node) in docs:
                continue
            call = patterns.get(id(node))
            if node.value.startswith("(?a") or (call is not None and _ascii_flag(call)):
                continue
            found.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value[:60]!r}")
    assert not found, f"a \\d matches every script's digits: start the pattern with (?a) or write [0-9]: {found}"


def test_the_scan_sees_what_it_must_refuse(tmp_path):
    # the scans above on a module written to break them
    tree = ast.parse('import re\nA = re.compile(r"(\\d+) MiB")\nB = r"x\\d"\nC = re.compile(r"(?a)\\d")\n'
                     'D = re.compile(r"\\d", re.ASCII)\nif "1".isdecimal(): pass\n')
    constants = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert [c.value.startswith("(?a") for c in constants if "\\d" in c.value] == [False, False, True, False]
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "compile"]
    assert [_ascii_flag(c) for c in calls] == [False, False, True]


@given(st.text(max_size=MAX_DIGITS + 5))
def test_ascii_digits_holds_exactly_for_a_bounded_run_of_0_to_9(text):
    expected = bool(re.fullmatch(f"[0-9]{{1,{MAX_DIGITS}}}", text))
    assert ascii_digits(text) == expected
    if expected:
        assert int(text) == int(text.encode("ascii"))


@given(st.integers(0, 10**MAX_DIGITS - 1), st.sampled_from("٠١٢٣٤٥٦٧٨٩۰۱۲०१२৩௪๕𝟗𝟘９"))
def test_other_scripts_digits_and_long_runs_are_not_digits(number, other):
    text = str(number)
    assert ascii_digits(text)
    assert not ascii_digits(text + other) and not ascii_digits(other + text) and not ascii_digits(other)
    assert not ascii_digits("9" * (MAX_DIGITS + 1)) and not ascii_digits("")
    assert "١".isdecimal() and int("١٢") == 12  # what the check stands in front of
    assert re.fullmatch(r"\d+", "١٢") and not re.fullmatch(r"(?a)\d+", "١٢")
