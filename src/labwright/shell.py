"""The one way a value reaches a shell command: :func:`quote` / :func:`join`, and the input check for paths.

Every value labwright puts into a command that a shell runs on a host (a path, a URL, a name) goes through
``quote`` (one word, whatever it holds: ``sh -c`` sees exactly that string as one argument) or ``join`` (several).
A path is also checked where it is read (:func:`path_problem`): shell characters and line breaks have no place in
a path labwright writes into commands and systemd units, so such a value is refused in one line naming its data
key, before anything runs, rather than carried around quoted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from pathlib import PurePosixPath

#: What a path given as data may not hold: shell operators and expansions (;|&<>$`), quotes and backslashes,
#: whitespace (a unit's ExecStart= splits on it) and control characters (line breaks end a command or a unit line).
UNSAFE_PATH = re.compile(r"[;|&<>$`'\"\\\s\x00-\x1f\x7f-\x9f]")  # control: C0, DEL and C1, as checks.control_character
NAMES = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", " ": "a space", "\x00": "a NUL byte"}


def quote(value: object) -> str:
    """``value`` as one shell word (``shlex.quote`` of its text)."""
    return shlex.quote(str(value))


def join(values: Iterable[object]) -> str:
    """Each value as one shell word, separated by spaces."""
    return " ".join(quote(value) for value in values)


def path_problem(value: str, absolute: bool = True) -> str | None:
    """Why ``value`` cannot be a path labwright puts into commands (None: it can). One line, no key."""
    found = UNSAFE_PATH.search(value)
    if found:
        char = found.group()
        what = NAMES.get(char) or (f"{char!r}" if char.isprintable() else f"the control character {char!r}")
        return (f"{value!r} contains {what}; give a path without shell characters (;|&<>$`), quotes, backslashes, "
                "spaces or line breaks")
    if absolute and not PurePosixPath(value).is_absolute():
        return f"{value!r} is not an absolute path"
    return None
