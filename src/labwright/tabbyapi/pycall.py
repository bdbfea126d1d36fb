"""Find one keyword argument inside one call in Python source, with the tokenizer rather than a regex.

Field note 001's ``sed`` matched a line; a line can sit in a comment, a string or another call. Tokens know about
comments and strings, and counting brackets tells which call an argument belongs to.
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass

OPENERS = {"(": ")", "[": "]", "{": "}"}


class SourceShapeError(ValueError):
    """The source does not tokenize or has no single call of the expected shape."""


@dataclass(frozen=True)
class Call:
    """A call's tokens from its ``(`` to the matching ``)``, both included."""

    tokens: list[tokenize.TokenInfo]


def tokens_of(text: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError) as exc:
        raise SourceShapeError(f"does not tokenize as Python ({exc})") from exc


def calls_named(tokens: list[tokenize.TokenInfo], name: str) -> list[Call]:
    """Every ``name(...)`` call; ``class name(`` and ``def name(`` are definitions, not calls."""
    found: list[Call] = []
    for index, token in enumerate(tokens[:-1]):
        after = tokens[index + 1]
        if token.type != tokenize.NAME or token.string != name or after.string != "(":
            continue
        before = tokens[index - 1].string if index else ""
        if before in ("class", "def"):
            continue
        found.append(Call(_balanced(tokens, index + 1)))
    return found


def _balanced(tokens: list[tokenize.TokenInfo], start: int) -> list[tokenize.TokenInfo]:
    stack: list[str] = []
    for index in range(start, len(tokens)):
        text = tokens[index].string
        if tokens[index].type != tokenize.OP:
            continue
        if text in OPENERS:
            stack.append(OPENERS[text])
        elif stack and text == stack[-1]:
            stack.pop()
            if not stack:
                return tokens[start:index + 1]
    raise SourceShapeError("a call's parenthesis is never closed")


def top_level(call: Call) -> list[tokenize.TokenInfo]:
    """The call's tokens at bracket depth 1 (its own arguments), comments and line breaks dropped."""
    depth = 0
    kept: list[tokenize.TokenInfo] = []
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    for token in call.tokens:
        is_op = token.type == tokenize.OP
        if is_op and token.string in OPENERS:
            if depth == 1:
                kept.append(token)
            depth += 1
        elif is_op and token.string in OPENERS.values():
            depth -= 1
            if depth == 1:
                kept.append(token)
        elif depth == 1 and token.type not in skip:
            kept.append(token)
    return kept


def find_sequence(tokens: list[tokenize.TokenInfo], strings: list[str]) -> int | None:
    """Index of the first run of tokens whose texts equal ``strings``."""
    width = len(strings)
    for index in range(len(tokens) - width + 1):
        if [t.string for t in tokens[index:index + width]] == strings:
            return index
    return None


def keyword_value(tokens: list[tokenize.TokenInfo], keyword: str) -> list[tokenize.TokenInfo] | None:
    """The tokens of ``keyword=<value>`` up to the next top-level comma or the end of the call."""
    for index in range(len(tokens) - 1):
        if tokens[index].type == tokenize.NAME and tokens[index].string == keyword and tokens[index + 1].string == "=":
            value: list[tokenize.TokenInfo] = []
            for token in tokens[index + 2:]:
                if token.string == ",":
                    break
                value.append(token)
            return value
    return None


def line_offsets(text: str) -> list[int]:
    """Character offset of each line start, numbered as tokenize numbers rows (1-based, split on ``\\n``)."""
    offsets = [0, 0]
    for line in io.StringIO(text).readlines():
        offsets.append(offsets[-1] + len(line))
    return offsets
