"""Server-sent events as OpenAI-compatible servers stream them: ``data: {json}`` events, ``data: [DONE]`` at the end.

Parsed per the WHATWG event-stream rules that matter here: an event is the ``data`` lines up to a blank line (several
``data`` lines join with newlines), lines starting with ``:`` are comments (keep-alives), ``event``/``id``/``retry``
fields are kept or ignored. A line that is not a field at all, or a ``data`` payload that is not JSON, is a malformed
stream: one clear error, not a crash deep in the benchmark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from labwright.errors import OperationFailed
from labwright.textio import loads_json

DONE = "[DONE]"
KNOWN_FIELDS = ("data", "event", "id", "retry")


class BadAnswer(OperationFailed):
    """A server's answer that is not a measurement: a stream cut short, a count or speed that cannot be (negative,
    NaN), a body shorter than announced. The benchmark reports it as an error row, never as numbers."""


class MalformedStream(BadAnswer):
    """The server's stream is not server-sent events carrying JSON."""


@dataclass(frozen=True)
class Event:
    data: str
    event: str = "message"

    @property
    def done(self) -> bool:
        return self.data.strip() == DONE

    def json(self) -> dict[str, Any]:
        try:
            value = loads_json(self.data)
        except json.JSONDecodeError as exc:
            raise MalformedStream(
                f"malformed stream: event data is not JSON ({exc.msg}): {self.data[:120]!r}") from None
        if not isinstance(value, dict):
            raise MalformedStream(f"malformed stream: event data is not a JSON object: {self.data[:120]!r}")
        return value


def iter_events(lines: Iterable[bytes]) -> Iterator[Event]:
    """Events from raw lines (each with or without its line ending), dispatched at each blank line and at the end."""
    data: list[str] = []
    event = "message"
    for raw in lines:
        try:
            line = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            raise MalformedStream(f"malformed stream: a line is not UTF-8: {raw[:80]!r}") from None
        if not line:
            if data:
                yield Event("\n".join(data), event)
            data, event = [], "message"
            continue
        if line.startswith(":"):
            continue
        field, sep, value = line.partition(":")
        if field not in KNOWN_FIELDS:
            raise MalformedStream(f"malformed stream: not a server-sent-events line: {line[:120]!r}")
        if not sep:
            value = ""
        elif value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            event = value
    if data:
        yield Event("\n".join(data), event)
