"""llama-server build cache: a cached binary is reused without network; a download must match the pinned sha256."""

from __future__ import annotations

import hashlib

import pytest

from labwright.errors import OperationFailed
from labwright.llamacpp import build as llama_build
from labwright.llamacpp.build import LlamaSource


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def test_cache_dir_is_per_version(cache_home):
    assert llama_build.cache_dir("1.2.3") == cache_home / "labwright" / "llama" / "1.2.3"


def test_a_cached_binary_is_reused_without_network_or_tools(cache_home, monkeypatch):
    binary = llama_build.cache_dir() / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"\x7fELF")
    (binary.parent / "llama-server.sha256").write_text(hashlib.sha256(b"\x7fELF").hexdigest() + "\n")

    def no(*args, **kwargs):
        raise AssertionError("must not download or build when the binary is cached")

    monkeypatch.setattr(llama_build, "download_sdist", no)
    monkeypatch.setattr(llama_build, "ensure_build_tools", no)
    assert llama_build.build_llama_server() == binary


def test_a_download_with_the_wrong_sha256_is_refused_and_removed(tmp_path, monkeypatch):
    served = tmp_path / "served.tar.gz"
    served.write_bytes(b"not the sdist")
    monkeypatch.setattr(llama_build, "sdist_url", lambda source: served.as_uri())
    source = LlamaSource(version="0", filename="x-0.tar.gz", sha256="0" * 64)
    dest = tmp_path / "cache"
    dest.mkdir()
    with pytest.raises(OperationFailed, match="sha256"):
        llama_build.download_sdist(dest, source)
    assert list(dest.iterdir()) == []


def test_a_matching_download_is_kept_and_not_fetched_again(tmp_path, monkeypatch):
    served = tmp_path / "served.tar.gz"
    served.write_bytes(b"the sdist")
    monkeypatch.setattr(llama_build, "sdist_url", lambda source: served.as_uri())
    source = LlamaSource(version="0", filename="x-0.tar.gz", sha256=hashlib.sha256(b"the sdist").hexdigest())
    dest = tmp_path / "cache"
    dest.mkdir()
    first = llama_build.download_sdist(dest, source)
    assert first.read_bytes() == b"the sdist"
    monkeypatch.setattr(llama_build, "sdist_url", lambda source: pytest.fail("fetched twice"))
    assert llama_build.download_sdist(dest, source) == first


def test_a_pypi_index_with_another_sha256_is_refused(monkeypatch):
    class Response:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self, *args):
            return b'{"files": [{"filename": "x-0.tar.gz", "url": "u", "hashes": {"sha256": "' + b"1" * 64 + b'"}}]}'

    monkeypatch.setattr(llama_build.urllib.request, "urlopen", lambda *a, **k: Response())
    with pytest.raises(OperationFailed, match="PyPI lists sha256"):
        llama_build.sdist_url(LlamaSource(version="0", filename="x-0.tar.gz", sha256="0" * 64))
