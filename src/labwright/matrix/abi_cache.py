"""The ABI verifier's cache: content hashes memoised by file stat, and results keyed by those hashes.

Everything is keyed by sha256 of file contents (an extension's .so, each torch library), so a cached verdict
can never outlive the bytes it was computed from. Hashing libtorch_cpu.so (434 MB) takes ~0.4 s, too slow
for a cached run, so each hash is memoised under the file's (size, mtime_ns, inode, ctime_ns), the way git's
index does: pip replaces a file on install (new inode), so an upgrade always misses the memo.

Layout under ``$LABWRIGHT_CACHE/abi`` (default ``~/.cache/labwright/abi``)::

    v2/hashes.json           path -> [size, mtime_ns, inode, ctime_ns, sha256 or null: "does not need torch"]
    v2/elf/<sha>.json        what one shared object needs/exports (DynamicInfo, exports left out)
    v2/exports/<sha>.txt     the exported dynamic symbols of one torch library, one per line
    v2/verdict/<key>.json    one extension's static check against one torch library set
    v2/import/<key>.json     one extension's import result with one Python and one torch library set

Each entry is sealed with its sha256 (``labwright.textio.seal``): one cut short, emptied or written over (``{}``, an
empty file, junk) reads as absent and is computed again, never taken for a verdict.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import csv
import dataclasses
import functools
import hashlib
import json
import os
import tempfile
import types
import typing
from pathlib import Path
from typing import Any

from labwright import paths
from labwright.textio import ascii_digits, loads_json, read_sealed, seal

VERSION = "v2"  # v2: every entry sealed (textio.seal)


def cache_root() -> Path:
    return paths.cache_path("abi")


def key_of(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _as_shape(data: Any, shape: Any) -> Any:
    """``data`` (read from JSON) built as ``shape`` (a dataclass of str/int/bool/float, ``X | None`` and
    ``list[...]`` fields, or a ``list[...]`` of one); ValueError when it is of another shape. Standard library only:
    this runs on a stack's target from the bundle, which carries no pydantic."""
    origin, args = typing.get_origin(shape), typing.get_args(shape)
    if shape is type(None):
        if data is None:
            return None
    elif origin in (typing.Union, types.UnionType):
        for option in args:
            try:
                return _as_shape(data, option)
            except ValueError:
                continue
    elif origin is list:
        if isinstance(data, list):
            return [_as_shape(item, args[0]) for item in data]
    elif dataclasses.is_dataclass(shape) and isinstance(shape, type):
        if isinstance(data, dict):
            hints = _hints(shape)
            fields = {f.name: f for f in dataclasses.fields(shape)}
            missing = [name for name, f in fields.items() if name not in data and
                       f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
            if not missing and set(data) <= set(fields):
                return shape(**{key: _as_shape(value, hints[key]) for key, value in data.items()})
    elif shape in (str, int, float, bool) and type(data) is shape:  # a bool is no int here
        return data
    raise ValueError(f"not {shape}")


@functools.lru_cache(maxsize=8)
def _hints(shape: type) -> dict[str, Any]:
    return typing.get_type_hints(shape)


class AbiCache:
    """A directory of small JSON/text files; ``enabled=False`` makes every lookup miss and every store a no-op."""

    def __init__(self, root: Path | None = None, enabled: bool = True):
        self.root = (root or cache_root()) / VERSION
        self.enabled = enabled
        self._hashes: dict[str, list[Any]] | None = None
        self._hashes_dirty = False
        self.hashed_bytes = 0  # how much was actually read to hash: 0 on a fully cached run
        self.recorded_bytes = 0  # how much was taken from an installer's RECORD instead of read

    # -- content hashes ------------------------------------------------------------------------
    def _hash_memo(self) -> dict[str, list[Any]]:
        if self._hashes is None:
            self._hashes = {}
            if self.enabled:
                data = self.load_json("hashes.json")
                if isinstance(data, dict):
                    self._hashes = data
        return self._hashes

    def _memo_entry(self, path: Path) -> list[Any] | None:
        st = path.stat()
        entry = self._hash_memo().get(str(path))
        if isinstance(entry, list) and len(entry) == 5 and entry[:4] == [st.st_size, st.st_mtime_ns, st.st_ino,
                                                                           st.st_ctime_ns] \
                and (entry[4] is None or isinstance(entry[4], str)):
            return entry
        return None  # not memoised, changed since, or an entry of another shape: hashed again

    def memoised_sha256(self, path: Path) -> str | None:
        """The memoised hash if the file is unchanged since it was hashed, else None (no file read)."""
        entry = self._memo_entry(path)
        return str(entry[4]) if entry and entry[4] else None

    def known_unrelated(self, path: Path) -> bool:
        """True when this unchanged file was seen not to need torch (so it is never hashed)."""
        entry = self._memo_entry(path)
        return bool(entry) and entry[4] is None  # type: ignore[index]

    def mark_unrelated(self, path: Path) -> None:
        # A CUDA torch's site-packages holds GBs of nvidia-* libraries that never link torch: remember them by
        # stat alone, so neither a cold nor a cached run ever reads them whole.
        st = path.stat()
        self._hash_memo()[str(path)] = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, None]
        self._hashes_dirty = True

    def sha256(self, path: Path, recorded: tuple[str, int, int] | None = None) -> str:
        """The file's sha256: memoised by stat, else from ``recorded`` = (sha256 hex, size, mtime_ns of the RECORD
        file) when the installer's RECORD vouches for it (same size, and neither written nor changed after RECORD
        was: pip writes RECORD last, from the bytes it wrote), else read and hashed."""
        known = self.memoised_sha256(path)
        if known is not None:
            return known
        st = path.stat()
        if recorded is not None:
            digest, size, record_mtime = recorded
            if size == st.st_size and st.st_mtime_ns <= record_mtime and st.st_ctime_ns <= record_mtime:
                self.recorded_bytes += st.st_size
                self._hash_memo()[str(path)] = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, digest]
                self._hashes_dirty = True
                return digest
        with open(path, "rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
        self.hashed_bytes += st.st_size
        self._hash_memo()[str(path)] = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, digest]
        self._hashes_dirty = True
        return digest

    def flush(self) -> None:
        if self._hashes_dirty and self._hashes is not None:
            # Drop entries for files that are gone, so the memo does not grow with every venv ever verified.
            live = {path: entry for path, entry in self._hashes.items() if os.path.exists(path)}
            self.store_json("hashes.json", live)
            self._hashes_dirty = False

    # -- entries -------------------------------------------------------------------------------
    def load_json(self, name: str) -> Any:
        if not self.enabled:
            return None
        payload = read_sealed(self.root / name)
        try:
            return None if payload is None else loads_json(payload.decode())
        except ValueError:  # UnicodeDecodeError too
            return None  # absent, torn or not ours (its seal does not hold): recompute

    def load_as(self, name: str, shape: Any) -> Any:
        """The cached entry ``name`` checked as ``shape`` (a dataclass, or ``list[...]`` of one), or None: absent,
        torn, or of another shape (written by another version, damaged): the caller computes it again."""
        data = self.load_json(name)
        if data is None:
            return None
        try:
            return _as_shape(data, shape)
        except (ValueError, TypeError, RecursionError):
            return None

    def store_json(self, name: str, value: Any) -> None:
        self._write(name, json.dumps(value, separators=(",", ":")))

    def load_lines(self, name: str) -> list[str] | None:
        if not self.enabled:
            return None
        payload = read_sealed(self.root / name)
        try:
            text = None if payload is None else payload.decode()
        except ValueError:
            return None
        return None if text is None else text.split("\n") if text else []

    def store_lines(self, name: str, lines: list[str]) -> None:
        self._write(name, "\n".join(lines))

    def _write(self, name: str, text: str) -> None:
        if not self.enabled:
            return
        target = self.root / name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            # Write then rename: two verifiers running at once each leave a whole file, never a torn one.
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        except OSError:
            return  # a read-only cache dir only costs speed, never a wrong verdict
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(seal(text.encode()))  # read back only while its seal holds (textio.read_sealed)
            os.replace(tmp, target)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)  # a full disk: leave no partial temp file behind


def recorded_hashes(package_dir: Path, under: str = "") -> dict[Path, tuple[str, int, int]]:
    """path -> (sha256 hex, size, RECORD's mtime_ns) for the files under ``package_dir/under`` from the RECORD of
    the distribution installed as ``package_dir`` (``site-packages/torch`` -> ``torch-*.dist-info/RECORD``); empty
    when there is none or two. Paths are ``package_dir.parent / <RECORD path>``, not resolved."""
    records = list(package_dir.parent.glob(f"{package_dir.name}-*.dist-info/RECORD"))
    if len(records) != 1:
        return {}
    try:
        record_mtime = records[0].stat().st_mtime_ns
        text = records[0].read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out = {}
    prefix = f"{package_dir.name}/{under}" if under else f"{package_dir.name}/"
    for row in csv.reader(line for line in text.splitlines() if line.startswith(prefix)):
        if len(row) != 3 or not row[1].startswith("sha256=") or not ascii_digits(row[2]):
            continue
        try:
            digest = base64.urlsafe_b64decode(row[1][len("sha256="):] + "==").hex()
        except (ValueError, binascii.Error):
            continue
        if len(digest) == 64:
            out[package_dir.parent / row[0]] = (digest, int(row[2]), record_mtime)
    return out
