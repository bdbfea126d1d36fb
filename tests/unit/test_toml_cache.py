"""textio.read_toml's parse cache (a large TOML parsed once per content, kept as JSON under the cache root): what it
returns is what tomllib returns, for generated documents, cold and warm; a junk, foreign or unreadable entry is
parsed again and repaired; a cache that cannot be written is skipped; a TOML date is never kept."""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labwright import textio
from labwright.errors import BadInput
from support import non_files

PAD = "# " + "x" * textio.TOML_CACHE_MIN_CHARS + "\n"  # past the threshold: the file is cached


def toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters (DEL included) escaped, the rest as it is."""
    return '"' + "".join(f"\\u{ord(c):04x}" if c in '"\\' or ord(c) < 0x20 or ord(c) == 0x7f else c
                         for c in text) + '"'


def toml_value(value: Any) -> str:
    """``value`` as TOML (repr spells a TOML float)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{toml_string(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
SCALARS = st.one_of(TEXT, st.integers(-2**63, 2**63 - 1), st.floats(), st.booleans())
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                      max_leaves=12)
DOCUMENTS = st.dictionaries(TEXT, VALUES, max_size=6)


def same(a: Any, b: Any) -> bool:
    """Equal with types and order (1 is not 1.0 nor true; nan equals nan; -0.0 is not 0.0)."""
    return json.dumps(a) == json.dumps(b)


def entries(root: Path) -> list[Path]:
    return sorted((root / "labwright" / "toml").glob("*.json"))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.delenv("LABWRIGHT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(root))
    return root


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(document=DOCUMENTS)
def test_a_cached_parse_is_what_tomllib_reads_cold_and_warm(document: dict, cache: Path, tmp_path: Path) -> None:
    text = PAD + "".join(f"{toml_string(k)} = {toml_value(v)}\n" for k, v in document.items())
    path = tmp_path / "doc.toml"
    path.write_text(text, encoding="utf-8")
    expected = tomllib.loads(text)
    assert same(textio.read_toml(path, "a test document"), expected)   # cold: parsed, kept
    assert len(entries(cache)) >= 1
    assert same(textio.read_toml(path, "a test document"), expected)   # warm: from the kept copy


def test_the_kept_copy_is_what_a_warm_read_returns(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "doc.toml"
    path.write_text(PAD + "a = 1\n")
    assert textio.read_toml(path, "x") == {"a": 1}
    [entry] = entries(cache)
    entry.write_bytes(textio.seal(b'{"a": 2}'))  # proves the read comes from the copy (never edited in real use)
    assert textio.read_toml(path, "x") == {"a": 2}
    path.write_text(PAD + "a = 3\n")  # another content: another key
    assert textio.read_toml(path, "x") == {"a": 3}


def kept_copy(entry: Path) -> object:
    payload = textio.unseal(entry.read_bytes())
    assert payload is not None, "a kept copy is sealed"
    return json.loads(payload)


# Junk in an entry's place: the sweep at 77a5710 wrote `{}` and `{"a": NaN}` there (any JSON object was taken for the
# parse: `matrix show` then listed no wheels, exit 0), a directory (never replaced), and the unsealed copy the
# previous format wrote; each is read as absent, parsed again, and the entry made whole.
@pytest.mark.parametrize("junk", [b"\xff\xfe junk", b"[1, 2]", b'{"a": ', b"", b"null", b"{}", b'{"a": NaN}',
                                  b'{"name": "x"}', textio.seal(b"[1, 2]")[:-1], textio.seal(b'{"name": "y"}')[1:]])
def test_a_junk_entry_is_parsed_again_and_repaired(junk: bytes, cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "doc.toml"
    path.write_text(PAD + 'name = "x"\n')
    textio.read_toml(path, "x")
    [entry] = entries(cache)
    entry.write_bytes(junk)
    assert textio.read_toml(path, "x") == {"name": "x"}
    assert kept_copy(entry) == {"name": "x"}


@pytest.mark.parametrize("kind", ["directory", "symlink loop", "dangling", "fifo"])
def test_no_file_in_the_entrys_place_is_read_and_an_empty_directory_is_replaced(kind: str, cache: Path,
                                                                                tmp_path: Path) -> None:
    path = tmp_path / "doc.toml"
    path.write_text(PAD + 'name = "x"\n')
    textio.read_toml(path, "x")
    [entry] = entries(cache)
    entry.unlink()
    non_files.put(entry, kind)
    assert textio.read_toml(path, "x") == {"name": "x"}
    if kind in ("directory", "dangling", "fifo"):
        assert kept_copy(entry) == {"name": "x"}


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "doc.toml"
    path.write_text(PAD + "a = 1\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.delenv("LABWRIGHT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker / "below"))  # under a regular file: the root is refused
    assert textio.read_toml(path, "x") == {"a": 1}
    if os.geteuid() != 0:  # a read-only directory stops only non-root
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        monkeypatch.setenv("XDG_CACHE_HOME", str(ro))
        assert textio.read_toml(path, "x") == {"a": 1}


def test_a_date_is_never_kept_and_bad_toml_is_one_line(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "doc.toml"
    path.write_text(PAD + "day = 2026-11-29\n")
    assert str(textio.read_toml(path, "x")["day"]) == "2026-11-29"
    assert entries(cache) == []
    path.write_text(PAD + "a = \n")
    with pytest.raises(BadInput) as refused:
        textio.read_toml(path, "a test document")
    assert "is not valid TOML" in str(refused.value) and "\n" not in str(refused.value)
    assert entries(cache) == []


def test_the_newest_entries_are_kept(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "doc.toml"
    for n in range(textio.TOML_CACHE_ENTRIES + 2):
        path.write_text(PAD + f"n = {n}\n")
        textio.read_toml(path, "x")
    kept = {kept_copy(e)["n"] for e in entries(cache)}
    assert len(kept) == textio.TOML_CACHE_ENTRIES and textio.TOML_CACHE_ENTRIES + 1 in kept and 0 not in kept


def test_the_key_is_the_content_and_the_python(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "doc.toml"
    text = PAD + "a = 1\n"
    path.write_text(text)
    textio.read_toml(path, "x")
    key = hashlib.sha256(f"toml-json-2 {sys.version_info[:2]}\n{text}".encode()).hexdigest()
    assert [e.name for e in entries(cache)] == [f"{key}.json"]


@settings(max_examples=200)
@given(payload=st.binary(max_size=200), junk=st.binary(max_size=80), cut=st.integers(0, 300))
def test_a_seal_holds_for_its_payload_alone(payload: bytes, junk: bytes, cut: int) -> None:
    """Generated: the payload comes back whole from its seal; cut short, extended or written over, it does not."""
    sealed = textio.seal(payload)
    assert textio.unseal(sealed) == payload
    if cut < len(sealed):
        assert textio.unseal(sealed[:cut]) is None
    if junk:
        assert textio.unseal(sealed + junk) is None
        assert textio.unseal(junk) is None or junk.startswith(b"# labwright-sealed sha256=")
