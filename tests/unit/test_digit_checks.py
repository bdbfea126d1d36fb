"""A text checked with ``str.isdigit()`` before ``int()`` is a traceback for a superscript or a circled digit:
'²'.isdigit() is True and int('²') raises ValueError (Unicode's No digits are "digits" but not decimal). labwright
checks digits with ``isdecimal()``, which holds exactly for what int() reads; this scan keeps it so."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import labwright

SRC = Path(labwright.__file__).parent


def test_no_module_checks_digits_with_isdigit():
    found = [f"{path.relative_to(SRC)}:{node.lineno}" for path in sorted(SRC.rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and node.attr == "isdigit"]
    assert not found, f"use .isdecimal() (what int() reads): {found}"


@given(st.text(min_size=1, max_size=6))
def test_isdecimal_holds_only_where_int_reads_the_text(text):
    if text.isdecimal():
        assert int(text) >= 0


def test_isdigit_would_let_a_superscript_through_to_int():
    assert "\u00b2".isdigit() and not "\u00b2".isdecimal()
