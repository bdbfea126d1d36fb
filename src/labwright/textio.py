"""Reading a user's file as text, JSON, TOML or YAML: every way it can be wrong is one BadInput line.

Each reader names the file, says what was wrong with it (missing, a directory, not a regular file, unreadable,
too large, binary, not UTF-8, not valid JSON/TOML/YAML with the line) and what was expected there, and ends with the
fix. ``what`` is what the caller expected at that path, as a noun phrase: "a tabbyAPI config.yml",
"the model's config.json", "a wheels matrix TOML (--out)". Nothing here writes.

    read_text(Path("/nope"), "a tabbyAPI config.yml")
    -> BadInput("/nope: no such file or directory (expected a tabbyAPI config.yml); check the path")

A leading UTF-8 byte order mark is removed from the text (``had_bom`` tells a caller that writes the file back);
YAML, JSON and TOML parsers then see the document as its author meant it, not a key named "\\ufeffmodel".
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from labwright.errors import BadInput

#: Bigger than any config, matrix, inventory or result labwright reads; stops `--config /dev/zero`-like reads.
MAX_TEXT_BYTES = 64 * 1024 * 1024
BOM = "\ufeff"


def describe_oserror(exc: OSError, path: Path | str | None = None, what: str = "") -> str:
    """One line for an OSError from touching ``path``: the path, the reason in words and the fix."""
    where = str(path if path is not None else (exc.filename or "?"))
    expected = f" (expected {what})" if what else ""
    code = exc.errno
    if isinstance(exc, FileNotFoundError) or code == errno.ENOENT:
        return f"{where}: no such file or directory{expected}; check the path"
    if isinstance(exc, IsADirectoryError) or code == errno.EISDIR:
        return f"{where} is a directory, not a file{expected}; give the file's path"
    if isinstance(exc, NotADirectoryError) or code == errno.ENOTDIR:
        return f"{where}: a part of this path is a file, not a directory{expected}; check the path"
    if isinstance(exc, PermissionError) or code in (errno.EACCES, errno.EPERM):
        return f"{where}: permission denied{expected}; fix its permissions or run as a user who can use it"
    if code == errno.ENOSPC:
        return f"{where}: no space left on the device; free space there and run again"
    if code == errno.EROFS:
        return f"{where}: the filesystem is read-only; choose a writable path"
    if code == errno.ENAMETOOLONG:
        return f"{where[:80]}…: the file name is too long; use a shorter path"
    if code == errno.ELOOP:
        return f"{where}: too many levels of symbolic links{expected}; check the path"
    reason = exc.strerror or type(exc).__name__
    return f"{where}: {reason}{expected}; check the path"


def _read_regular(path: Path, what: str, max_bytes: int) -> bytes:
    # Opened without blocking: a named pipe nobody writes to would block open() for ever. A pipe that has a writer
    # (``--config <(...)``) is then read blocking, to its end; one without a writer reads as empty, said as such.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as handle:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise BadInput(f"{path} is a directory, not a file (expected {what}); give the file's path")
            if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
                raise BadInput(f"{path} is not a regular file (expected {what}); give the path of a file")
            os.set_blocking(fd, True)
            data = handle.read(max_bytes + 1)
            if not data and stat.S_ISFIFO(mode) and not stat.S_ISREG(mode):
                raise BadInput(f"{path} is a pipe with nothing written to it (expected {what}); give the path of a "
                               "file")
    except IsADirectoryError:
        raise BadInput(f"{path} is a directory, not a file (expected {what}); give the file's path") from None
    except OSError as exc:
        raise BadInput(describe_oserror(exc, path, what)) from None
    if len(data) > max_bytes:
        limit = f"{max_bytes // (1024 * 1024)} MiB" if max_bytes >= 1024 * 1024 else f"{max_bytes} bytes"
        raise BadInput(f"{path} is larger than {limit} (expected {what}); give the right file")
    return data


def read_bytes(path: Path | str, what: str, *, max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of a regular file (or a pipe), or BadInput naming ``path`` and ``what``."""
    return _read_regular(Path(path), what, max_bytes)


def decode_text(data: bytes, path: Path | str, what: str) -> str:
    """``data`` as UTF-8 text without a leading BOM, or BadInput: binary (NUL bytes) or not UTF-8, with the offset."""
    if b"\x00" in data[:8192]:
        raise BadInput(f"{path} is a binary file, not text (expected {what}); give the right file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}; "
                       f"expected {what}); give the right file or convert it to UTF-8") from None
    return text[1:] if text.startswith(BOM) else text


def had_bom(path: Path | str) -> bool:
    """Whether the file starts with a UTF-8 byte order mark (False when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(3) == BOM.encode()
    except OSError:
        return False


def read_text(path: Path | str, what: str, *, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of ``path`` (a leading BOM removed), or one BadInput line: the path, what is wrong, ``what``
    was expected there, and the fix."""
    return decode_text(read_bytes(path, what, max_bytes=max_bytes), path, what)


def loads_json(text: str | bytes | bytearray) -> Any:
    """``json.loads`` for input labwright did not write itself (files, state, a server's or a tool's answer): the
    two ways the standard parser fails outside ``JSONDecodeError`` (nesting deeper than the recursion limit:
    RecursionError; a number past the 4,300-digit int limit: a bare ValueError) are a ``JSONDecodeError`` too, so
    every caller's ``except ValueError`` (or ``JSONDecodeError``) answers them in its own words. Every module that
    runs in labwright's own process parses JSON through this (tests/unit/test_json_entry.py)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", _as_text(text), 0) from None
    except ValueError as exc:
        raise json.JSONDecodeError(str(exc).split(";")[0], _as_text(text), 0) from None


def load_json(stream: Any) -> Any:
    """``json.load`` through ``loads_json``."""
    return loads_json(stream.read())


def _as_text(text: str | bytes | bytearray) -> str:
    return text if isinstance(text, str) else bytes(text[:200]).decode("utf-8", "replace")


def parse_json(text: str, path: Path | str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}; "
                       f"expected {what}); fix or replace the file") from None
    except RecursionError:
        raise BadInput(f"{path} is nested too deeply to be {what}; give the right file") from None
    except ValueError as exc:   # a number past Python's digit limit for int() (4,300 digits)
        raise BadInput(f"{path} is not valid JSON ({str(exc).split(';')[0]}; expected {what}); fix or replace the "
                       "file") from None


def read_json(path: Path | str, what: str, *, max_bytes: int = MAX_TEXT_BYTES) -> Any:
    """``path`` parsed as JSON, or one BadInput line (the reading errors of ``read_text``, or the line and column
    of the JSON error)."""
    return parse_json(read_text(path, what, max_bytes=max_bytes), path, what)


def read_json_object(path: Path | str, what: str, *, max_bytes: int = MAX_TEXT_BYTES) -> dict[str, Any]:
    """Like ``read_json`` but the document must be a JSON object."""
    data = read_json(path, what, max_bytes=max_bytes)
    if not isinstance(data, dict):
        raise BadInput(f"{path} holds a JSON {type(data).__name__}, not an object (expected {what}); "
                       "give the right file")
    return data


def parse_toml(text: str, path: Path | str, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{path} is not valid TOML ({exc}; expected {what}); fix or replace the file") from None
    except RecursionError:
        raise BadInput(f"{path} is nested too deeply to be {what}; give the right file") from None
    except ValueError as exc:   # a number past Python's digit limit for int() (4,300 digits)
        raise BadInput(f"{path} is not valid JSON ({str(exc).split(';')[0]}; expected {what}); fix or replace the "
                       "file") from None


def read_toml(path: Path | str, what: str, *, max_bytes: int = MAX_TEXT_BYTES) -> dict[str, Any]:
    """``path`` parsed as TOML, or one BadInput line (the reading errors of ``read_text``, or the TOML error with
    its line and column). A large file is parsed once per content (:func:`parse_toml_cached`)."""
    text = read_text(path, what, max_bytes=max_bytes)
    if len(text) >= TOML_CACHE_MIN_CHARS:
        return parse_toml_cached(text, path, what)
    return parse_toml(text, path, what)


#: TOML texts at least this long are parsed once per content and kept as JSON under the cache root
#: (``toml/SHA256.json``): tomllib is pure Python, and the wheels matrix's listings (2.6 MB, ~6,200 inline tables)
#: took 0.45 s of CPU to parse in every process that read them, `labwright matrix stacks` 1.4 s in all; their JSON
#: loads in 0.04 s (measured 2026-11-29 on the 2-core test machine).
TOML_CACHE_MIN_CHARS = 32 * 1024
#: Entries kept; the oldest beyond this go when a new one is written (a refreshed matrix leaves its old files).
TOML_CACHE_ENTRIES = 64
_TOML_CACHE_FORMAT = "toml-json-2"  # 2: sealed (textio.seal)


def parse_toml_cached(text: str, path: Path | str, what: str) -> dict[str, Any]:
    """``parse_toml(text, ...)``, from a JSON copy of an earlier parse of the same text where one is kept. The copy is
    a cache, never state, sealed with its sha256 (:func:`seal`): one that is missing, unreadable, junk, not an object
    or whose seal does not hold (``{}`` written over it) is parsed again and rewritten (atomically); a cache
    directory that cannot be written is skipped; a document JSON cannot hold as it is (a TOML date or time) is never
    kept. What it returns is what tomllib returns: JSON keeps str, int, float (nan and inf
    included), bool, list and dict exactly."""
    import hashlib
    import sys

    key = hashlib.sha256(f"{_TOML_CACHE_FORMAT} {sys.version_info[:2]}\n{text}".encode("utf-8", "surrogatepass"))
    try:
        from labwright.paths import cache_path

        entry = cache_path("toml", f"{key.hexdigest()}.json")
    except BadInput:   # a cache root the environment names wrongly is reported by whatever writes there
        return parse_toml(text, path, what)
    sealed = read_sealed(entry)
    try:
        kept = json.loads(sealed) if sealed is not None else None
        if isinstance(kept, dict):
            return kept
    except (ValueError, RecursionError):
        pass
    data = parse_toml(text, path, what)
    try:
        copy = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError):   # a date or time: not JSON
        return data
    try:
        from labwright.atomic import write_bytes_atomic

        entry.parent.mkdir(parents=True, exist_ok=True)
        if entry.is_dir() and not entry.is_symlink():
            entry.rmdir()  # an empty directory in the entry's place (a full one stays: the write below fails)
        write_bytes_atomic(entry, seal(copy), mode=0o644)
        _prune(entry.parent, TOML_CACHE_ENTRIES)
    except OSError:
        pass
    return data


def _prune(directory: Path, keep: int) -> None:
    """Remove all but the ``keep`` newest ``*.json`` entries of ``directory`` (another process's removal is fine)."""
    entries = []
    for entry in directory.glob("*.json"):
        try:
            entries.append((entry.stat().st_mtime_ns, entry))
        except OSError:
            continue
    for _, old in sorted(entries, reverse=True)[keep:]:
        with contextlib.suppress(OSError):
            old.unlink()


#: A YAML document may expand through its aliases (``*name``) to at most this many nodes, or to
#: ``YAML_EXPANSION_FACTOR`` times the nodes it spells out, whichever is more: a 500-byte "billion laughs" of nested
#: aliases loads in milliseconds (PyYAML shares the aliased objects) but every reader that walks it (a check, a
#: copy, a JSON dump) then walks 10^9 items. A document without aliases is never refused.
YAML_MAX_NODES = 10_000
YAML_EXPANSION_FACTOR = 100


class YamlExpansionError(ValueError):
    """A YAML document whose aliases expand past the bound (or refer to themselves); the message is a phrase."""


def _expanded_nodes(root: Any) -> tuple[int, int]:
    """(nodes spelled out, nodes after alias expansion) of a composed YAML node graph; the expansion is counted, not
    built (each node's expanded size once, memoized), capped just past any limit. An alias to a node that contains
    it is refused: nothing labwright reads is recursive."""
    import yaml

    cap = 1 << 62
    size: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children: list[Any] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        if done:
            active.discard(key)
            size[key] = min(cap, 1 + sum(size[id(child)] for child in children))
            continue
        if key in size:
            continue
        if key in active:
            raise YamlExpansionError("has an alias to a node that contains it (a recursive document)")
        active.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in active:
                raise YamlExpansionError("has an alias to a node that contains it (a recursive document)")
            if id(child) not in size:
                stack.append((child, False))
    return len(size), size[id(root)]


def yaml_load(text: str, loader: type | None = None) -> Any:
    """The one YAML loader of labwright: ``yaml.safe_load`` (or ``loader``, a ``yaml.SafeLoader`` subclass) with
    alias expansion bounded. Raises yaml.YAMLError, RecursionError, or YamlExpansionError (a phrase: "expands its
    aliases to ... nodes ...") before anything is built from a document that expands past the bound; a scalar Python
    cannot build (an int of over 4,300 digits, a date that is none) is a yaml.YAMLError too."""
    import yaml

    reader = (loader or yaml.SafeLoader)(text)
    try:
        node = reader.get_single_node()
        if node is None:
            return None
        spelled, expanded = _expanded_nodes(node)
        limit = max(YAML_MAX_NODES, YAML_EXPANSION_FACTOR * spelled)
        if expanded > limit:
            shown = f"{expanded:,}" if expanded < 1 << 62 else "more than 10^18"
            raise YamlExpansionError(f"expands its aliases to {shown} nodes from {spelled:,} written (at most "
                                     f"{limit:,}: a nested-alias bomb?)")
        try:
            return reader.construct_document(node)
        except (ValueError, OverflowError) as exc:
            # a scalar PyYAML's resolver typed but Python cannot build: an int of over 4,300 digits, a date like
            # 2024-13-45; a YAMLError, as every other malformed document
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise yaml.YAMLError(f"a value Python cannot hold ({first[:120]})") from None
    finally:
        reader.dispose()


def parse_yaml(text: str, path: Path | str, what: str) -> Any:
    import yaml  # only the YAML readers pay for it

    try:
        return yaml_load(text)
    except YamlExpansionError as exc:
        raise BadInput(f"{path} {exc} (expected {what}); fix or replace the file") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise BadInput(f"{path} is not valid YAML ({where}{exc.problem or exc.context}; expected {what}); "
                       "fix or replace the file") from None
    except (yaml.YAMLError, RecursionError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadInput(f"{path} is not valid YAML ({first}; expected {what}); fix or replace the file") from None


def read_yaml(path: Path | str, what: str, *, max_bytes: int = MAX_TEXT_BYTES) -> Any:
    """``path`` parsed as YAML (:func:`yaml_load`), or one BadInput line (reading errors, or the YAML error with its
    line and column)."""
    return parse_yaml(read_text(path, what, max_bytes=max_bytes), path, what)


#: Longest run of digits a number in a tool's or server's answer may have: more than any count, size in bytes or
#: nanosecond stamp (2^64 is 20 digits); int() refuses over 4,300 with a ValueError a parser may not expect.
MAX_DIGITS = 40


def ascii_digits(text: str) -> bool:
    """True for a run of ASCII digits 0-9, at most MAX_DIGITS of them. ``str.isdecimal()`` holds for other scripts'
    digits too ('١٢' is 12 to int()) and for any length; every digit check in labwright goes through here."""
    return 0 < len(text) <= MAX_DIGITS and text.isascii() and text.isdecimal()


#: The first line of a cache entry labwright wrote (``seal``): a comment to pip, TOML, YAML and shell alike.
_SEAL = b"# labwright-sealed sha256="


def seal(payload: bytes) -> bytes:
    """``payload`` behind one line with its sha256: what labwright writes into a cache, so that an entry cut short,
    overwritten or replaced by anything else (``{}``, an empty file, junk) reads as absent (:func:`unseal`) and is
    made again, never taken for what was cached."""
    import hashlib

    return _SEAL + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def unseal(data: bytes) -> bytes | None:
    """The payload of a :func:`seal`-ed cache entry, or None when ``data`` is not one whose seal holds."""
    import hashlib

    head, newline, payload = data.partition(b"\n")
    if not newline or head != _SEAL + hashlib.sha256(payload).hexdigest().encode():
        return None
    return payload


def read_sealed(path: Path | str) -> bytes | None:
    """The payload of the sealed cache entry at ``path``; None when it is absent, unreadable, not a regular file
    (a directory, a loop of links) or its seal does not hold: the caller makes it again."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a named pipe: no wait for a writer
    except (OSError, ValueError):
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            data = handle.read(MAX_TEXT_BYTES + 1)
    except (OSError, ValueError):
        return None
    return unseal(data) if len(data) <= MAX_TEXT_BYTES else None
