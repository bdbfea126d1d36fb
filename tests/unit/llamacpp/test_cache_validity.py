"""The CPU build's cache (``<cache>/llama/<version>/llama-server`` + ``llama-server.sha256``) counts only when the
binary is a regular file whose sha256 is the one its sidecar holds (labwright.llamacpp.build.cached_build_problem):
`labwright build llamacpp` builds a damaged entry again (--dry says it would), the deploy's local_binary refuses it
in one line naming the cache and the command that rebuilds it, and no sidecar content raises anything but BadInput.

Nothing here compiles llama.cpp or reaches the network: the cache holds small real files, and the rebuild tests
replace only the download/unpack/compile steps (build_llama_server's own locking, junk removal, sidecar and atomic
rename run as they are)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pyinfra.api.exceptions import DeployError

from labwright.cli import main
from labwright.errors import BadInput
from labwright.llamacpp import build as llama_build
from labwright.llamacpp.build import NOT_BUILT, cached_build_problem, read_sidecar, sidecar_path
from labwright.llamacpp.deploy_data import HostBuildMissing, local_binary
from support.hypothesis_budget import examples

CONTENT = b"\x7fELF a small stand-in for llama-server"
DIGEST = hashlib.sha256(CONTENT).hexdigest()
BOM = "\ufeff".encode()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The pinned version's cache directory under a cache root of the test's own (LABWRIGHT_CACHE)."""
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path / "cache"))
    directory = llama_build.cache_dir()
    directory.mkdir(parents=True)
    return directory


def cached(directory: Path, content: bytes = CONTENT, sidecar: bytes | None = None) -> Path:
    """A cache entry: the binary and its sidecar (default: the digest and a newline, as build_llama_server writes)."""
    binary = directory / "llama-server"
    binary.write_bytes(content)
    sidecar_path(binary).write_bytes((hashlib.sha256(content).hexdigest() + "\n").encode() if sidecar is None
                                     else sidecar)
    return binary


# --- the one validity test ---------------------------------------------------------------------------------------

def test_a_binary_whose_sha256_is_its_sidecar_s_is_valid(cache: Path) -> None:
    binary = cached(cache)
    assert cached_build_problem(binary) is None
    sidecar_path(binary).write_text(DIGEST)  # no newline: the same digest
    assert cached_build_problem(binary) is None
    assert read_sidecar(sidecar_path(binary)) == DIGEST


def test_nothing_there_is_not_built(cache: Path) -> None:
    assert cached_build_problem(cache / "llama-server") == NOT_BUILT
    (cache / "llama-server").symlink_to(cache / "gone")  # a dangling link: nothing to run either
    assert cached_build_problem(cache / "llama-server") == NOT_BUILT


@pytest.mark.parametrize(("make", "words"), [
    (lambda d: cached(d, b"", sidecar=(DIGEST + "\n").encode()), "is empty"),                   # emptied
    (lambda d: cached(d, b""), "is empty"),                          # emptied, with the empty file's digest
    (lambda d: cached(d, CONTENT[:5], sidecar=(DIGEST + "\n").encode()), f"not the {DIGEST}"),  # truncated
    (lambda d: cached(d, b"junk", sidecar=(DIGEST + "\n").encode()), "has sha256"),             # junk
    (lambda d: (d / "llama-server").write_bytes(CONTENT), "has no llama-server.sha256 beside it"),
    (lambda d: cached(d, sidecar=b""), "not one sha256"),
    (lambda d: cached(d, sidecar=b"\n"), "not one sha256"),
    (lambda d: cached(d, sidecar=DIGEST.upper().encode()), "not one sha256"),
    (lambda d: cached(d, sidecar=f"{DIGEST}  llama-server\n".encode()), "not one sha256"),
    (lambda d: cached(d, sidecar=b"\x00\x01\x02" * 30), "binary file"),
    (lambda d: cached(d, sidecar=b"\xff\xfe" + DIGEST.encode()), "not UTF-8"),
    (lambda d: cached(d, sidecar=(DIGEST + "\n").encode() * 200), "larger than"),
    (lambda d: (d / "llama-server").mkdir(), "is a directory"),
    (lambda d: os.mkfifo(d / "llama-server"), "not a regular file"),
])
def test_a_damaged_entry_is_never_valid(cache: Path, make, words: str) -> None:
    make(cache)
    problem = cached_build_problem(cache / "llama-server")
    assert problem not in (None, NOT_BUILT) and words in problem and "\n" not in problem


def test_a_sidecar_that_is_a_directory_is_no_sidecar(cache: Path) -> None:
    binary = cache / "llama-server"
    binary.write_bytes(CONTENT)
    sidecar_path(binary).mkdir()
    assert "has no valid sha256 beside it" in cached_build_problem(binary)


# --- the property: no sidecar content raises anything but BadInput, and only the digest is valid -------------------

def _variants(digest: str) -> st.SearchStrategy[bytes]:
    """Sidecar contents near the digest: cases, whitespace, lengths, other scripts' digits, sha256sum's line."""
    other_digits = st.sampled_from(["٠١٢٣٤٥٦٧٨٩", "０１２３４５６７８９", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९"])
    near = st.one_of(
        st.just(digest.upper()),
        st.builds(lambda i: digest[:i] + digest[i].upper() + digest[i + 1:], st.integers(0, 63)),
        st.builds(lambda n: digest[:n], st.integers(0, 63)),
        st.builds(lambda extra: digest + extra, st.text(alphabet="0123456789abcdef", min_size=1, max_size=4)),
        st.builds(lambda pre, post: pre + digest + post,
                  st.text(alphabet=" \t\r\n\v\f\u00a0\u2028\u3000", max_size=3),
                  st.text(alphabet=" \t\r\n\v\f\u00a0\u2028\u3000", max_size=3)),
        st.builds(lambda digits, i: digest[:i] + digits[int(digest[i], 16) % 10] + digest[i + 1:],
                  other_digits, st.integers(0, 63)),
        st.builds(lambda name: f"{digest}  {name}\n", st.text(max_size=10)),
        st.just(digest + "\n\n"),
        st.just(digest + "\r\n"),
        st.just("0" * 64),
        st.just("0" * 64 + "\n"),
    )
    return st.one_of(
        near.map(lambda text: text.encode("utf-8", "surrogatepass")),
        st.binary(max_size=200),
        st.text(max_size=100).map(lambda text: text.encode("utf-8", "surrogatepass")),
        st.binary(max_size=100).map(lambda junk: digest.encode() + junk),
    )


def _is_the_digest(data: bytes, digest: str) -> bool:
    """The oracle: exactly the digest, one newline after it or not (read_text drops a leading BOM)."""
    data = data.removeprefix(BOM)
    return data in (digest.encode(), (digest + "\n").encode())


@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_variants(DIGEST))
@example(data=b"")
@example(data=b"\n")
@example(data=b"\xff")
@example(data=b"\x00" * 64)
@example(data=(DIGEST + "\n").encode())
@example(data=DIGEST.encode())
@example(data=BOM + DIGEST.encode())
def test_any_sidecar_content_is_the_declared_error_or_exactly_the_digest(tmp_path: Path, data: bytes) -> None:
    binary = tmp_path / "llama-server"
    binary.write_bytes(CONTENT)
    sidecar_path(binary).write_bytes(data)
    try:
        digest = read_sidecar(sidecar_path(binary))
    except BadInput as exc:
        assert not _is_the_digest(data, DIGEST) and "\n" not in str(exc)
    else:  # a sidecar holds a digest only when it is one, exactly (not necessarily this binary's)
        assert re.fullmatch(r"[0-9a-f]{64}", digest) and _is_the_digest(data, digest)
    problem = cached_build_problem(binary)  # never raises
    assert (problem is None) == _is_the_digest(data, DIGEST)
    # the deploy, reading the same cache: the binary and its digest, or one DeployError line with the fix
    try:
        assert local_binary({}, builds=tmp_path) == (str(binary), DIGEST) and problem is None
    except HostBuildMissing:
        raise AssertionError("a damaged build is no missing one") from None
    except DeployError as exc:
        assert problem is not None
        message = str(exc)
        assert "\n" not in message and str(binary) in message and "labwright build llamacpp" in message
        assert "llamacpp_binary_sha256" not in message


# --- the deploy's reading of the cache (local_binary) ---------------------------------------------------------------

def test_the_deploy_pushes_a_valid_cached_build(cache: Path) -> None:
    binary = cached(cache)
    assert local_binary({}) == (str(binary), DIGEST)


def test_the_deploy_builds_a_missing_one_first(cache: Path) -> None:
    with pytest.raises(HostBuildMissing):
        local_binary({})


@pytest.mark.parametrize("make", [
    lambda d: cached(d, sidecar=b""),                      # was IndexError
    lambda d: cached(d, sidecar=b"\xff\xfe\xfa"),          # was UnicodeDecodeError
    lambda d: cached(d, sidecar=b"\x00" * 64),
    lambda d: cached(d, b"", sidecar=(DIGEST + "\n").encode()),  # was "llamacpp_binary_sha256: ... expected"
    lambda d: (d / "llama-server").write_bytes(CONTENT),  # no sidecar
    lambda d: (d / "llama-server").mkdir(),
])
def test_a_damaged_cached_build_is_one_line_naming_the_cache_and_the_fix(cache: Path, make) -> None:
    make(cache)
    with pytest.raises(DeployError) as error:
        local_binary({})
    message = str(error.value)
    assert not isinstance(error.value, HostBuildMissing)
    assert message.startswith(f"the cached llama-server build {cache / 'llama-server'} ")
    assert "`labwright build llamacpp`" in message and f"remove {cache}" in message
    assert "llamacpp_binary_sha256" not in message and "\n" not in message


def test_a_digest_the_user_gives_still_decides_for_the_cached_binary(cache: Path) -> None:
    binary = cache / "llama-server"
    binary.write_bytes(CONTENT)  # no sidecar: the user's digest vouches for it
    assert local_binary({"llamacpp_binary_sha256": DIGEST}) == (str(binary), DIGEST)
    with pytest.raises(DeployError, match=r"^llamacpp_binary_sha256: .* has sha256 .*, expected 0{64}$"):
        local_binary({"llamacpp_binary_sha256": "0" * 64})


@pytest.mark.parametrize("sidecar", [b"", b"\n", b"\xff\xfe\xfa", b"\x00junk", b"not a digest\n"])
def test_a_junk_sidecar_beside_a_given_binary_names_the_key_the_user_set(tmp_path: Path, sidecar: bytes) -> None:
    binary = tmp_path / "mine"
    binary.write_bytes(CONTENT)
    sidecar_path(binary).write_bytes(sidecar)
    with pytest.raises(DeployError) as error:
        local_binary({"llamacpp_binary_src": str(binary)})
    message = str(error.value)
    assert message.startswith(f"llamacpp_binary_src: {sidecar_path(binary)} ") and "\n" not in message
    assert "llamacpp_binary_sha256=DIGEST" in message
    sidecar_path(binary).write_text(f"{DIGEST} *mine\n")  # sha256sum's binary-mode line
    assert local_binary({"llamacpp_binary_src": str(binary)}) == (str(binary), DIGEST)


# --- `labwright build llamacpp` and build_llama_server ---------------------------------------------------------------

def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict, str]:
    code = main(["build", "llamacpp", *argv])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.startswith("{") else {"text": out}, err


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """The download/unpack/compile steps as a stand-in that 'compiles' CONTENT (the calls listed); everything else
    of build_llama_server runs as it is."""
    calls: list[str] = []
    made = tmp_path / "compiled"

    def download(dest: Path, source) -> Path:
        calls.append("download")
        sdist = dest / source.filename
        sdist.write_bytes(b"sdist")
        return sdist

    def compile_target(vendor, build, target, jobs, log, extra=()) -> Path:
        calls.append("compile")
        made.mkdir(exist_ok=True)
        (made / target).write_bytes(CONTENT)
        return made / target

    monkeypatch.setattr(llama_build, "ensure_build_tools", lambda: None)
    monkeypatch.setattr(llama_build, "download_sdist", download)
    monkeypatch.setattr(llama_build, "unpack_source", lambda sdist, into, source: into)
    monkeypatch.setattr(llama_build, "compile_target", compile_target)
    return calls


def test_a_valid_cache_is_used_and_nothing_is_built(cache: Path, builds: list[str], capsys) -> None:
    binary = cached(cache)
    code, doc, err = run(capsys, "--dry", "--json")
    assert code == 0 and doc["cached"] is True and doc["binary"] == str(binary) and err == ""
    code, doc, err = run(capsys, "--json")
    assert code == 0 and (doc["cached"], doc["built"]) == (True, False) and builds == []


@pytest.mark.parametrize("make", [
    lambda d: cached(d, b"", sidecar=(DIGEST + "\n").encode()),  # an emptied binary
    lambda d: cached(d, CONTENT[:5], sidecar=(DIGEST + "\n").encode()),  # truncated
    lambda d: cached(d, sidecar=b""),
    lambda d: cached(d, sidecar=b"\xff\xfe"),
    lambda d: (d / "llama-server").write_bytes(CONTENT),
    lambda d: (d / "llama-server").mkdir(),
    lambda d: ((d / "llama-server").mkdir(), (d / "llama-server" / "x").write_text("x"),
               sidecar_path(d / "llama-server").mkdir()),
])
def test_a_damaged_cache_is_due_in_dry_and_built_again(cache: Path, builds: list[str], capsys, make) -> None:
    make(cache)
    binary = cache / "llama-server"
    code, doc, err = run(capsys, "--dry", "--json")
    assert code == 0 and (doc["cached"], doc["built"]) == (False, False) and builds == []
    assert err.startswith(f"labwright: the cached build {binary} ") and err.endswith(
        ": a real run builds it again\n") and err.count("\n") == 1
    code, doc, err = run(capsys, "--dry")
    assert code == 0 and doc == {"text": f"would build: {binary}\n"}
    code, doc, err = run(capsys, "--json")
    assert code == 0 and (doc["binary"], doc["cached"], doc["built"]) == (str(binary), False, True)
    assert builds == ["download", "compile"]
    assert f"labwright: the cached build {binary} " in err and ": building it again" in err
    assert binary.read_bytes() == CONTENT and sidecar_path(binary).read_text() == DIGEST + "\n"
    assert cached_build_problem(binary) is None
    assert {p.name for p in cache.iterdir()} - {"build.log"} == {".lock", "llama-server", "llama-server.sha256"}
    # then it is the cache: used, nothing built again
    code, doc, err = run(capsys, "--json")
    assert code == 0 and (doc["cached"], doc["built"]) == (True, False) and builds == ["download", "compile"]


def test_a_missing_build_is_built_without_a_damage_line(cache: Path, builds: list[str], capsys) -> None:
    code, doc, err = run(capsys, "--dry", "--json")
    assert code == 0 and doc["cached"] is False and err == ""
    binary = llama_build.build_llama_server()
    assert builds == ["download", "compile"] and cached_build_problem(binary) is None
    assert "building it again" not in capsys.readouterr().err
    assert llama_build.build_llama_server() == binary and builds == ["download", "compile"]


# --- the GPU and release builds: a manifest.json and the files it lists ------------------------------------------
# The same class for the builds kept as a directory (CUDA, Vulkan, --release): their manifest was trusted for
# existing (atomic.once_under_lock, `build llamacpp` saying "cached"), and the deploy read it with a bare ["files"].

def whole_build(directory: Path) -> Path:
    """A cached GPU/release build as the builds leave it: bin/llama-server, a library, manifest.json with both."""
    (directory / "bin").mkdir(parents=True)
    (directory / "lib" / "llama-server").mkdir(parents=True)
    (directory / "bin" / "llama-server").write_bytes(CONTENT)
    (directory / "lib" / "llama-server" / "libcudart.so.13").write_bytes(b"lib")
    files = {"bin/llama-server": DIGEST, "lib/llama-server/libcudart.so.13": hashlib.sha256(b"lib").hexdigest()}
    (directory / "manifest.json").write_text(json.dumps({"files": files}))
    return directory


@pytest.mark.parametrize(("junk", "words"), [
    (b"", "is not valid JSON"), (b"{}", "not a build's manifest"), (b"[1, 2]", "not a build's manifest"),
    (b'{"files": {"bin/llama-server": "xyz"}}', "not a build's manifest"),
    (b'{"files": {"lib/a.so": "' + b"a" * 64 + b'"}}', "not a build's manifest"),
    (b'{"files": {"../../etc/passwd": "' + b"a" * 64 + b'", "bin/llama-server": "' + b"a" * 64 + b'"}}',
     "not a build's manifest"),
    (b"\xff\xfe", "not UTF-8"), (b'{"files": ', "not valid JSON"),
])
def test_a_manifest_that_is_no_manifest_is_no_build(tmp_path: Path, junk: bytes, words: str) -> None:
    directory = whole_build(tmp_path / "cuda13.0-sm86")
    assert llama_build.manifest_problem(directory) is None
    (directory / "manifest.json").write_bytes(junk)
    problem = llama_build.manifest_problem(directory)
    assert problem is not None and words in problem and "build it again" in problem
    with pytest.raises(BadInput, match=re.escape(str(directory / "manifest.json"))):
        llama_build.manifest_files(directory)


def test_a_file_the_manifest_lists_that_is_gone_is_no_build(tmp_path: Path) -> None:
    directory = whole_build(tmp_path / "vulkan")
    (directory / "lib" / "llama-server" / "libcudart.so.13").unlink()
    assert llama_build.manifest_problem(directory) == "lacks lib/llama-server/libcudart.so.13, which its manifest lists"
    (directory / "lib" / "llama-server" / "libcudart.so.13").mkdir()
    assert "lacks" in (llama_build.manifest_problem(directory) or "")


def test_once_under_lock_makes_again_what_is_there_but_not_whole(tmp_path: Path) -> None:
    from labwright.atomic import once_under_lock

    directory = whole_build(tmp_path / "vulkan")
    done, lock = directory / "manifest.json", tmp_path / ".vulkan.lock"
    with once_under_lock(done, lock, llama_build.manifest_ok) as todo:
        assert todo is False
    done.write_text("{}")
    with once_under_lock(done, lock, llama_build.manifest_ok) as todo:
        assert todo is True
    with pytest.raises(TypeError):  # no caller can ask for an entry trusted for being there
        once_under_lock(done, lock).__enter__()  # type: ignore[call-arg]


def test_the_deploy_refuses_a_junk_manifest_in_one_line(cache: Path) -> None:
    from labwright.llamacpp import vulkan as vulkan_build
    from labwright.llamacpp.deploy_data import BuildChoice, server_files, vulkan_manifest

    directory = whole_build(cache / vulkan_build.BUILD_KEY)
    assert vulkan_manifest(cache)["files"]
    (directory / "manifest.json").write_text('{"files": 5}')
    assert vulkan_manifest(cache) == {}
    with pytest.raises(DeployError) as refused:
        server_files(BuildChoice("vulkan"), {}, "/opt/llama/bin/llama-server", cache)
    line = str(refused.value)
    assert "\n" not in line and "manifest.json is not a build's manifest" in line and "build it again" in line


def test_build_dry_says_a_junk_gpu_build_is_due(cache: Path, capsys, monkeypatch) -> None:
    from labwright.llamacpp import vulkan as vulkan_build

    monkeypatch.setattr(vulkan_build, "local_debian_major", lambda: 13)
    directory = whole_build(vulkan_build.vulkan_cache_dir())
    code, doc, err = run(capsys, "--vulkan", "--dry", "--json")
    assert code == 0 and doc["cached"] is True and err == ""
    (directory / "manifest.json").write_text("{}")
    code, doc, err = run(capsys, "--vulkan", "--dry", "--json")
    assert code == 0 and doc["cached"] is False and doc["built"] is False
    assert err.count("\n") == 1 and "is not whole" in err and "a real run builds it again" in err
