"""The ABI verifier's cache: content hashes memoised by stat, entries that can't go stale or half-written."""

from __future__ import annotations

import hashlib
import os

from labwright.matrix.abi_cache import AbiCache, cache_root


def test_hash_is_memoised_until_the_file_changes(tmp_path):
    lib = tmp_path / "libc10.so"
    lib.write_bytes(b"version one")
    cache = AbiCache(tmp_path / "cache")
    assert cache.memoised_sha256(lib) is None
    assert cache.sha256(lib) == hashlib.sha256(b"version one").hexdigest()
    cache.flush()

    again = AbiCache(tmp_path / "cache")
    assert again.memoised_sha256(lib) == hashlib.sha256(b"version one").hexdigest()
    assert again.sha256(lib) and again.hashed_bytes == 0

    # Same size, new content, as an in-place rewrite would leave it: the stat changes, so the memo misses.
    lib.write_bytes(b"version two")
    os.utime(lib, ns=(1, 1))
    assert again.memoised_sha256(lib) is None
    assert again.sha256(lib) == hashlib.sha256(b"version two").hexdigest()


def test_memo_forgets_files_that_are_gone(tmp_path):
    kept, gone = tmp_path / "a.so", tmp_path / "b.so"
    kept.write_bytes(b"a")
    gone.write_bytes(b"b")
    cache = AbiCache(tmp_path / "cache")
    cache.sha256(kept), cache.sha256(gone)
    gone.unlink()
    cache.flush()
    assert set(AbiCache(tmp_path / "cache").load_json("hashes.json")) == {str(kept)}


def test_torn_or_missing_entries_read_as_misses(tmp_path):
    cache = AbiCache(tmp_path / "cache")
    assert cache.load_json("verdict/x.json") is None
    cache.store_json("verdict/x.json", [1, 2])
    assert cache.load_json("verdict/x.json") == [1, 2]
    (cache.root / "verdict" / "x.json").write_text('[1, 2')  # half a file
    assert cache.load_json("verdict/x.json") is None
    cache.store_lines("exports/y.txt", ["a", "b"])
    assert cache.load_lines("exports/y.txt") == ["a", "b"]
    cache.store_lines("exports/empty.txt", [])
    assert cache.load_lines("exports/empty.txt") == []


def test_unwritable_cache_costs_speed_not_an_error(tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("")
    cache = AbiCache(blocker)
    cache.store_json("verdict/x.json", [])
    assert cache.load_json("verdict/x.json") is None


def test_cache_root_follows_labwright_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path))
    assert cache_root() == tmp_path / "abi"
    monkeypatch.delenv("LABWRIGHT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "labwright" / "abi"
