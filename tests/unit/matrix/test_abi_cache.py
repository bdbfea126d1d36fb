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


def _installed(tmp_path, data: bytes, record_size: int | None = None, digest: bytes | None = None):
    """site-packages/torch/lib/libx.so and a torch-*.dist-info/RECORD written after it, as pip leaves them."""
    import base64

    site = tmp_path / "site-packages"
    lib = site / "torch" / "lib" / "libx.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(data)
    sha = base64.urlsafe_b64encode(digest or hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record = site / "torch-2.13.0+cpu.dist-info" / "RECORD"
    record.parent.mkdir()
    record.write_text(f"torch/__init__.py,sha256=abc,1\ntorch/lib/libx.so,sha256={sha},{record_size or len(data)}\n"
                      "torch-2.13.0+cpu.dist-info/RECORD,,\n")
    st = lib.stat()
    os.utime(record, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # RECORD is written last
    return site / "torch", lib


def test_an_installers_record_stands_in_for_hashing(tmp_path):
    from labwright.matrix.abi_cache import recorded_hashes

    torch_dir, lib = _installed(tmp_path, b"\x7fELF library bytes")
    recorded = recorded_hashes(torch_dir, "lib/")
    assert list(recorded) == [lib]
    cache = AbiCache(tmp_path / "cache")
    assert cache.sha256(lib, recorded[lib]) == hashlib.sha256(lib.read_bytes()).hexdigest()
    assert cache.hashed_bytes == 0 and cache.recorded_bytes == lib.stat().st_size


def test_a_record_that_does_not_vouch_for_the_file_is_not_trusted(tmp_path):
    from labwright.matrix.abi_cache import recorded_hashes

    # a RECORD whose digest is wrong is only used when size and times say pip wrote the file: here the size differs
    torch_dir, lib = _installed(tmp_path / "a", b"\x7fELF real", record_size=999, digest=b"\0" * 32)
    cache = AbiCache(tmp_path / "cache-a")
    assert cache.sha256(lib, recorded_hashes(torch_dir, "lib/")[lib]) == hashlib.sha256(b"\x7fELF real").hexdigest()
    assert cache.hashed_bytes == len(b"\x7fELF real")
    # a library replaced after the install (newer than RECORD, same size) is read and hashed, not taken on trust
    torch_dir, lib = _installed(tmp_path / "b", b"\x7fELF old!", digest=hashlib.sha256(b"\x7fELF old!").digest())
    recorded = recorded_hashes(torch_dir, "lib/")[lib]
    lib.write_bytes(b"\x7fELF new!")
    os.utime(lib, ns=(recorded[2] + 10**9, recorded[2] + 10**9))
    cache = AbiCache(tmp_path / "cache-b")
    assert cache.sha256(lib, recorded) == hashlib.sha256(b"\x7fELF new!").hexdigest()
    assert cache.recorded_bytes == 0


def test_entries_of_another_shape_read_as_misses(tmp_path):
    """A cached entry written by another version or damaged in place is computed again, never a TypeError."""
    from labwright.matrix.abi import MissingSymbol
    from labwright.matrix.elfsyms import DynamicInfo

    cache = AbiCache(tmp_path / "cache")
    cache.store_json("elf/a.json", {"needed": ["libc10.so"], "soname": "liba.so"})
    assert cache.load_as("elf/a.json", DynamicInfo) == DynamicInfo(needed=["libc10.so"], soname="liba.so")
    for wrong in ([1, 2], {"needed": "libc10.so"}, {"needed": [1]}, "x", {"soname": {"a": 1}}):
        cache.store_json("elf/a.json", wrong)
        assert cache.load_as("elf/a.json", DynamicInfo) is None, wrong
    cache.store_json("verdict/v.json", [{"mangled": "_Z1fv", "demangled": "f()"}])
    assert cache.load_as("verdict/v.json", list[MissingSymbol]) == [MissingSymbol("_Z1fv", "f()")]
    for wrong in ({"mangled": "_Z1fv"}, [{"mangled": "_Z1fv"}], [1], [{"mangled": 1, "demangled": "f()"}]):
        cache.store_json("verdict/v.json", wrong)
        assert cache.load_as("verdict/v.json", list[MissingSymbol]) is None, wrong


def test_a_hash_memo_of_another_shape_is_hashed_again(tmp_path):
    lib = tmp_path / "libc10.so"
    lib.write_bytes(b"one")
    for wrong in (5, "abc", [1, 2], {"x": 1}, [None] * 5):
        cache = AbiCache(tmp_path / "cache")
        cache.store_json("hashes.json", {str(lib): wrong})
        cache = AbiCache(tmp_path / "cache")
        assert cache.memoised_sha256(lib) is None and not cache.known_unrelated(lib)
        assert cache.sha256(lib) == hashlib.sha256(b"one").hexdigest()
