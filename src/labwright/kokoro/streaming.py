"""Kokoro-FastAPI sentence streaming, as pure logic over file texts (no host access).

Field note 002 measured ``stream: true`` delivering every chunk at once after ~1400 ms, and ~575 ms to first audio after
two changes (docs/kokoro.md):

- api/src/inference/kokoro_v1.py: the ``pipeline(text, ...)`` call in ``KokoroV1.generate`` splits with
  ``split_pattern=r'(?<=[.!?])\\s+'`` (sentences) instead of ``r'\\n+'`` (newlines only), so a short two-sentence
  input becomes two inference calls instead of one;
- after each yielded chunk (``yield AudioChunk(`` there, and the yields of the ``async for chunk_data in
  self.model_manager.generate(`` loop in api/src/services/tts_service.py) ``await asyncio.sleep(0)`` hands control
  back to the event loop so the HTTP layer can flush before the next synchronous inference starts.

Two upstream shapes are known: field note 002's, where the call passes ``split_pattern=r'\\n+'`` explicitly (the
value is replaced), and later ones, where the call passes no split_pattern and KPipeline's default ``r'\\n+'``
applies (the keyword is added). Anything else (another split pattern someone chose, a missing anchor, two candidates) is
"unrecognised": it names the file and the anchor and nothing is written, in either file.
"""

from __future__ import annotations

import ast
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from labwright.atomic import write_files_atomic
from labwright.errors import BadInput, OperationFailed
from labwright.tabbyapi.ngram import unified_diff
from labwright.tabbyapi.pycall import (
    SourceShapeError,
    calls_named,
    keyword_value,
    line_offsets,
    tokens_of,
    top_level,
)

KOKORO_V1 = "api/src/inference/kokoro_v1.py"
TTS_SERVICE = "api/src/services/tts_service.py"
PIPELINE_CALL = "pipeline"
UPSTREAM_SPLIT = r"\n+"
SENTENCE_SPLIT = r"(?<=[.!?])\s+"
SPLIT_SOURCE = 'r"(?<=[.!?])\\s+"'
YIELD_POINT = "await asyncio.sleep(0)"
YIELD_COMMENT = "  # labwright: let the HTTP layer flush this chunk"
_SLEEP_TOKENS = ["await", "asyncio", ".", "sleep", "(", "0", ")"]
_AUDIO_YIELD = ["yield", "AudioChunk", "("]
_STREAM_LOOP = ["async", "for", "chunk_data", "in", "self", ".", "model_manager", ".", "generate", "("]
_SKIPPED = (tokenize.NL, tokenize.COMMENT)

Mode = Literal["patch", "already", "unrecognised"]


class ShapeUnrecognised(OperationFailed):
    """The Kokoro-FastAPI source has no known shape: nothing was changed."""


class _Unrecognised(Exception):
    def __init__(self, path: str, why: str, anchor: str):
        super().__init__(f"{path}: {why}; expected {anchor}: nothing changed, patch by hand or pin a known "
                         "Kokoro-FastAPI ref")


@dataclass(frozen=True)
class FileChange:
    path: str
    before: str
    after: str
    label: str

    @property
    def diff(self) -> str:
        return unified_diff(self.before, self.after, self.label)


@dataclass(frozen=True)
class StreamingChange:
    """What to do: ``mode``, the files that change (none for already/unrecognised), the era, a one-line message."""

    mode: Mode
    message: str
    era: str = ""
    files: list[FileChange] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.mode != "unrecognised"

    @property
    def diff(self) -> str:
        return "".join(change.diff for change in self.files)

    def as_json(self) -> dict[str, object]:
        return {"mode": self.mode, "era": self.era, "files": [c.path for c in self.files], "diff": self.diff,
                "message": self.message}

    def raise_for_mode(self) -> None:
        if self.mode == "unrecognised":
            raise ShapeUnrecognised(self.message)


@dataclass(frozen=True)
class KokoroTexts:
    """The two files the fix touches, as texts (None: missing), and where they live."""

    kokoro_v1: str | None
    tts_service: str | None
    root: str = ""

    def path(self, relative: str) -> str:
        return f"{self.root.rstrip('/')}/{relative}" if self.root else relative


def _apply(source: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    return source


def _offset(offsets: list[int], position: tuple[int, int]) -> int:
    return offsets[position[0]] + position[1]


def _line_end(source: str, offsets: list[int], row: int) -> int:
    """Offset just after line ``row`` (its newline included)."""
    return offsets[row + 1] if row + 1 < len(offsets) else len(source)


def _newline_of(source: str) -> str:
    return "\r\n" if "\r\n" in source else "\n"


def _yield_point_edit(source: str, tokens: list[tokenize.TokenInfo], start: int, offsets: list[int]) -> \
        tuple[int, int, str] | None:
    """The edit adding ``await asyncio.sleep(0)`` after the statement whose first token is ``tokens[start]``;
    None when the next statement at the same level already is that."""
    index = start
    while tokens[index].type != tokenize.NEWLINE:
        index += 1
        if index >= len(tokens):
            raise SourceShapeError("a yield statement never ends")
    newline = tokens[index]
    following = index + 1
    while following < len(tokens) and tokens[following].type in _SKIPPED:
        following += 1
    if [t.string for t in tokens[following:following + len(_SLEEP_TOKENS)]] == _SLEEP_TOKENS:
        return None
    line = source[offsets[tokens[start].start[0]]:_line_end(source, offsets, tokens[start].start[0])]
    indent = line[:len(line) - len(line.lstrip(" \t"))]
    at = _line_end(source, offsets, newline.start[0])
    ending = _newline_of(source)
    prefix = "" if source[:at].endswith("\n") else ending
    return at, at, f"{prefix}{indent}{YIELD_POINT}{YIELD_COMMENT}{ending}"


def _import_edit(source: str, tokens: list[tokenize.TokenInfo], offsets: list[int]) -> list[tuple[int, int, str]]:
    """``import asyncio`` before the first top-level import, unless the module imports it already."""
    if re.search(r"^import asyncio\s*(#.*)?$", source, re.MULTILINE):
        return []
    for token in tokens:
        if token.start[1] == 0 and token.type == tokenize.NAME and token.string in ("import", "from"):
            at = offsets[token.start[0]]
            return [(at, at, f"import asyncio{_newline_of(source)}")]
    raise SourceShapeError("no top-level import to put `import asyncio` next to")


def plan_kokoro_v1(source: str, path: str) -> tuple[str, str]:
    """(new text, era) for kokoro_v1.py; raises _Unrecognised."""
    anchor_call = f"one `{PIPELINE_CALL}(text, ...)` call in KokoroV1.generate"
    try:
        tokens = tokens_of(source)
        calls = [c for c in calls_named(tokens, PIPELINE_CALL) if [t.string for t in top_level(c)[:1]] == ["text"]]
    except SourceShapeError as exc:
        raise _Unrecognised(path, str(exc), anchor_call) from None
    if len(calls) != 1:
        raise _Unrecognised(path, f"{len(calls)} `{PIPELINE_CALL}(text, ...)` calls", anchor_call)
    args = top_level(calls[0])
    offsets = line_offsets(source)
    edits: list[tuple[int, int, str]] = []
    value = keyword_value(args, "split_pattern")
    if value is None:
        era = "default split (KPipeline's r'\\n+')"
        last = args[-1]  # the call's last argument token (top_level drops its parentheses)
        at = _offset(offsets, last.end)
        edits.append((at, at, f" split_pattern={SPLIT_SOURCE}," if last.string == "," else
                      f", split_pattern={SPLIT_SOURCE}"))
    else:
        try:
            pattern = ast.literal_eval(" ".join(t.string for t in value)) if len(value) == 1 else None
        except (ValueError, SyntaxError):
            pattern = None
        if pattern == UPSTREAM_SPLIT:
            era = "explicit split_pattern=r'\\n+' (field note 002's)"
            edits.append((_offset(offsets, value[0].start), _offset(offsets, value[0].end), SPLIT_SOURCE))
        elif pattern == SENTENCE_SPLIT:
            era = "sentence split already"
        else:
            shown = " ".join(t.string for t in value) or "nothing"
            raise _Unrecognised(path, f"the `{PIPELINE_CALL}(` call passes split_pattern={shown}, neither the "
                                "upstream r'\\n+' nor the sentence split", "split_pattern=r'\\n+' or no split_pattern")
    starts = [i for i in range(len(tokens)) if [t.string for t in tokens[i:i + 3]] == _AUDIO_YIELD]
    if len(starts) != 1:
        raise _Unrecognised(path, f"{len(starts)} `yield AudioChunk(` statements", "exactly one, in the "
                            f"`for result in {PIPELINE_CALL}(` loop")
    try:
        sleep = _yield_point_edit(source, tokens, starts[0], offsets)
        if sleep is not None:
            edits.append(sleep)
            edits += _import_edit(source, tokens, offsets)
    except SourceShapeError as exc:
        raise _Unrecognised(path, str(exc), "`yield AudioChunk(` inside KokoroV1.generate") from None
    return _apply(source, edits), era


def plan_tts_service(source: str, path: str) -> str:
    """New text for tts_service.py: a yield point after each yield of the model_manager.generate loop."""
    anchor = "`async for chunk_data in self.model_manager.generate(` with yields in its body"
    try:
        tokens = tokens_of(source)
    except SourceShapeError as exc:
        raise _Unrecognised(path, str(exc), anchor) from None
    width = len(_STREAM_LOOP)
    loops = [i for i in range(len(tokens)) if [t.string for t in tokens[i:i + width]] == _STREAM_LOOP]
    if len(loops) != 1:
        raise _Unrecognised(path, f"{len(loops)} such loops", anchor)
    index = loops[0]
    # The loop's header ends at the NEWLINE after its colon; its body is the INDENT ... DEDENT that follows.
    while tokens[index].type != tokenize.NEWLINE:
        index += 1
    depth, yields = 0, []
    for position in range(index + 1, len(tokens)):
        kind = tokens[position].type
        if kind == tokenize.INDENT:
            depth += 1
        elif kind == tokenize.DEDENT:
            depth -= 1
            if depth == 0:
                break
        elif kind == tokenize.NAME and tokens[position].string == "yield" and depth > 0:
            yields.append(position)
    if not yields:
        raise _Unrecognised(path, "the loop body yields nothing", anchor)
    offsets = line_offsets(source)
    try:
        edits = [edit for edit in (_yield_point_edit(source, tokens, y, offsets) for y in yields) if edit]
        if edits:
            edits += _import_edit(source, tokens, offsets)
    except SourceShapeError as exc:
        raise _Unrecognised(path, str(exc), anchor) from None
    return _apply(source, edits)


def plan_streaming(texts: KokoroTexts) -> StreamingChange:
    """Decide and compute the change for one Kokoro-FastAPI tree. Never raises for a shape; see raise_for_mode."""
    changes: list[FileChange] = []
    era = ""
    try:
        for relative, text in ((KOKORO_V1, texts.kokoro_v1), (TTS_SERVICE, texts.tts_service)):
            path = texts.path(relative)
            if text is None:
                raise _Unrecognised(path, "not found: is this a Kokoro-FastAPI checkout (the directory holding api/)?",
                                    "api/src/inference/kokoro_v1.py and api/src/services/tts_service.py")
            if relative == KOKORO_V1:
                after, era = plan_kokoro_v1(text, path)
            else:
                after = plan_tts_service(text, path)
            if after != text:
                changes.append(FileChange(path, text, after, relative))
    except _Unrecognised as exc:
        return StreamingChange("unrecognised", str(exc), era)
    if not changes:
        return StreamingChange("already", "sentence split and yield points already in place", era)
    what = ", ".join(c.label for c in changes)
    return StreamingChange("patch", f"sentence split and yield points ({what})", era, changes)


def read_tree(source_dir: Path) -> KokoroTexts:
    """The two files of a local checkout; BadInput when the directory itself is unusable."""
    if not source_dir.is_dir():
        raise BadInput(f"--source {source_dir}: not a directory; pass the Kokoro-FastAPI checkout (the directory "
                       "holding api/), e.g. /opt/kokoro")

    def text(path: Path) -> str | None:
        try:
            # Bytes, not read_text: universal newlines would turn a CRLF file into LF on write-back.
            return path.read_bytes().decode("utf-8") if path.is_file() else None
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(f"{path}: cannot be read as UTF-8 text ({exc.__class__.__name__}); fix its permissions "
                           "or encoding") from exc

    if not (source_dir / "api").is_dir():
        raise BadInput(f"--source {source_dir}: not a Kokoro-FastAPI checkout (no api/ directory in it); pass the "
                       "directory holding api/, e.g. /opt/kokoro")
    return KokoroTexts(text(source_dir / KOKORO_V1), text(source_dir / TTS_SERVICE), str(source_dir))


def write_change(change: StreamingChange) -> None:
    """Write every changed file, or none on a write error (labwright.atomic.write_files_atomic: each staged and on
    disk before the first rename); the replaced content stays as NAME.prev."""
    try:
        write_files_atomic({Path(file.path): file.after.encode("utf-8") for file in change.files}, keep_previous=True)
    except OSError as exc:
        raise OperationFailed(f"{exc.filename}: cannot write ({exc.strerror}); run as the file's owner or root, or "
                              "use --dry to see the change") from exc
