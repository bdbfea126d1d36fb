"""`matrix refresh` from the registry, offline: a 127.0.0.1 server answers with PyPI's recorded real responses
(recorded/RECORDED says when; scripts/record-registry re-records them), with or without ETag, slow, down or wrong."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from packaging.version import Version

from labwright.errors import BadInput
from labwright.matrix.load import _load, read_components
from labwright.matrix.outside import OUTSIDE_FEEDS
from labwright.matrix.registry import FEEDS, STATE_FILE, built_against, data_ages, read_state, refresh_registry
from labwright.matrix.resolve import StackRequest, resolve_stack
from labwright.paths import packaged_matrix_dir
from support.cli_child import run_cli

RECORDED = Path(__file__).parent / "recorded"
COMPONENTS = read_components(packaged_matrix_dir() / "components.toml")


@dataclass
class Registry:
    """What the fake registry serves and what it was asked."""

    etag: bool = True
    override: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # path -> (status, body)
    delay: dict[str, float] = field(default_factory=dict)  # path -> seconds before answering
    edits: dict[str, object] = field(default_factory=dict)  # package -> callable(data) changing its JSON
    requests: list[tuple[str, str]] = field(default_factory=list)  # (path, If-None-Match)
    answered_304: int = 0
    simple_json: bool = False  # the PyTorch index answers PEP 691 JSON instead of PEP 503 HTML
    authorization: list[str] = field(default_factory=list)  # Authorization headers GitHub's stand-in was sent
    headers: dict[str, dict[str, str]] = field(default_factory=dict)  # path -> extra response headers
    ranges: set[str] = field(default_factory=set)  # paths answered by range (206) when asked so
    range_requests: list[tuple[str, str]] = field(default_factory=list)  # (path, Range)

    def body(self, path: str) -> tuple[int, bytes]:
        if path in self.override:
            return self.override[path]
        if path.startswith(("/pytorch/", "/github/")):
            return outside_body(self, path)
        if path.startswith("/pypi/") and path.endswith("/json"):
            package = path.split("/")[2]
            file = RECORDED / "pypi" / f"{package}.json"
            if not file.is_file():
                return 404, b'{"message": "Not Found"}'
            data = json.loads(file.read_text())
            if package in self.edits:
                self.edits[package](data)  # type: ignore[operator]
            return 200, json.dumps(data).encode()
        if path.startswith("/files/"):
            file = RECORDED / "files" / path.split("/")[-1]
            return (200, file.read_bytes()) if file.is_file() else (404, b"not found")
        return 404, b"not found"


@pytest.fixture
def registry():
    state = Registry()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):
            state.requests.append((self.path, self.headers.get("If-None-Match", "")))
            if self.path in state.delay:
                time.sleep(state.delay[self.path])  # the server is slow; the client must give up on its own
            status, body = state.body(self.path)
            import hashlib

            tag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            if state.etag and status == 200 and self.headers.get("If-None-Match") == tag:
                state.answered_304 += 1
                self.send_response(304)
                self.send_header("ETag", tag)
                self.end_headers()
                return
            if self.path.startswith("/github/"):
                state.authorization.append(self.headers.get("Authorization", ""))
            wanted = self.headers.get("Range", "")
            if wanted.startswith("bytes=") and status == 200 and self.path in state.ranges:
                # HTTP range requests (RFC 9110 14.1.2: "bytes=-N" is the last N bytes) where a test serves a file so
                state.range_requests.append((self.path, wanted))
                first, _, last = wanted[len("bytes="):].partition("-")
                start = max(len(body) - int(last), 0) if first == "" else int(first)
                stop = len(body) - 1 if first == "" or not last else min(int(last), len(body) - 1)
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{stop}/{len(body)}")
                self.send_header("Content-Length", str(stop - start + 1))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body[start:stop + 1])
                return
            self.send_response(status)
            html = self.path.startswith("/pytorch/") and not state.simple_json
            self.send_header("Content-Type", "text/html" if html else (
                "application/vnd.pypi.simple.v1+json" if self.path.startswith("/pytorch/") else "application/json"))
            for key, value in state.headers.get(self.path, {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            if state.etag and status == 200:
                self.send_header("ETag", tag)
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    # shutdown() waits for the loop's next poll: every 0.02 s, not the default 0.5 s
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    root = f"http://127.0.0.1:{server.server_address[1]}"
    state.index = f"{root}/pypi"  # type: ignore[attr-defined]
    state.pytorch = f"{root}/pytorch"  # type: ignore[attr-defined]
    state.github = f"{root}/github"  # type: ignore[attr-defined]
    yield state
    server.shutdown()
    server.server_close()


def load_matrix(root: Path):
    _load.cache_clear()  # the loader caches per directory; these tests rewrite the directory between loads
    return _load(str(root))


def cli(cli_env, *args):
    return run_cli(["matrix", *args], env=cli_env, timeout=300)


def _refresh(registry, out: Path, **kwargs):
    for name in ("components.toml", "cuda.toml", "stacks.toml"):  # so load_matrix(out) reads what refresh wrote
        if not (out / name).exists():
            (out / name).write_bytes((packaged_matrix_dir() / name).read_bytes())
    return refresh_registry(out, COMPONENTS, index=registry.index, timeout=kwargs.pop("timeout", 10),
                            pytorch_index=registry.pytorch, github_api=registry.github, **kwargs)


def _lines(report, package):
    return next(o for o in report.outcomes if o.package == package).lines


def test_recorded_responses_are_dated_and_small():
    recorded = (RECORDED / "RECORDED").read_text()
    assert recorded.startswith("recorded: 20"), "RECORDED must say when the responses were recorded"
    size = sum(p.stat().st_size for p in RECORDED.rglob("*") if p.is_file())
    assert size < 600_000, f"recorded responses grew to {size} bytes: trim them in scripts/record-registry"
    for feed in FEEDS:
        assert (RECORDED / "pypi" / f"{feed.package}.json").is_file(), f"{feed.package} was not recorded"


def test_cold_refresh_sees_the_newest_torch_and_classifies_it(registry, tmp_path):
    report = _refresh(registry, tmp_path)
    newest = json.loads((RECORDED / "pypi" / "torch.json").read_text())["info"]["version"]
    torch = next(o for o in report.outcomes if o.package == "torch")
    assert torch.status == "updated" and torch.newest == newest
    matrix = load_matrix(tmp_path)
    rows = [w for w in matrix.wheels if w.package == "torch" and w.version == newest]
    assert rows, f"torch {newest} (newest on the recorded PyPI) is not in torch_pypi.toml"
    # its CUDA is not in the name: it comes from the project JSON's Requires-Dist (cuda-toolkit==13.x)
    assert all(w.cuda and w.source == "pypi.org" and w.seen for w in rows)
    assert all(w.cxx11_abi == "TRUE" for w in rows)
    # an older release's CUDA comes from its wheel's core metadata (PEP 658)
    state = read_state(tmp_path)
    from_metadata = {k: v for k, v in state["built_against"].items() if v.get("from", "").endswith(".metadata")}
    assert from_metadata, "no torch release was classified from its wheel's metadata"
    key, meta = next(iter(sorted(from_metadata.items())))
    version = key.split("==")[1]
    assert {w.cuda for w in matrix.wheels if w.package == "torch" and w.version == version} == {meta["cuda"]}
    # releases whose metadata the registry does not serve are named, and left out rather than guessed
    missing = [line for line in torch.lines if "core metadata (PEP 658) not readable" in line]
    assert missing and "left out" in missing[0]
    # resolve knows the newest torch now (it said "no such torch wheel" before)
    resolution = resolve_stack(StackRequest(torch=newest, python="3.12"), matrix)
    chosen = resolution.chosen("torch")
    assert chosen and chosen[0].wheel.version == newest
    assert "no such torch wheel" not in " ".join(resolution.errors)


def test_families_without_wheels_on_pypi_say_so(registry, tmp_path):
    report = _refresh(registry, tmp_path)
    for package in ("flash-attn", "causal-conv1d"):
        outcome = next(o for o in report.outcomes if o.package == package)
        assert outcome.status == "updated" and outcome.sdists_only and not outcome.wheels
    assert not (tmp_path / "flash_attn_pypi.toml").exists()
    exl = [w for w in load_matrix(tmp_path).wheels if w.package == "exllamav3" and w.source == "pypi.org"]
    assert exl and all(w.platform == "any" and "JIT" in w.note for w in exl)
    # the stand-in serves every outside source but mjun0812's releases (404): named, nothing else
    assert set(report.unreached) == {"mjun0812/flash-attention-prebuild-wheels releases"}


def test_no_change_refresh_is_conditional_and_rewrites_nothing(registry, tmp_path):
    _refresh(registry, tmp_path)
    files = {p: (p.stat().st_ino, p.read_bytes()) for p in tmp_path.glob("*.toml")}
    registry.requests.clear()
    report = _refresh(registry, tmp_path)
    assert {o.status for o in report.outcomes} == {"unchanged"}
    json_requests = [(p, tag) for p, tag in registry.requests if p.endswith("/json")]
    assert all(tag for _, tag in json_requests), f"a request without If-None-Match: {json_requests}"
    # every PyPI feed and every outside source that answered the first time (all but mjun0812's 404 and the
    # cu132 index that does not exist) answered 304
    assert registry.answered_304 == len(FEEDS) + len(OUTSIDE_FEEDS) - 2
    assert not [p for p, _ in registry.requests if p.endswith(".metadata")], "metadata was fetched again"
    assert report.written == []
    assert {p: (p.stat().st_ino, p.read_bytes()) for p in tmp_path.glob("*.toml")} == files


def test_without_validators_the_body_hash_decides(registry, tmp_path):
    registry.etag = False
    _refresh(registry, tmp_path)
    before = (tmp_path / "torch_pypi.toml").stat().st_ino
    report = _refresh(registry, tmp_path)
    assert {o.status for o in report.outcomes} == {"unchanged"}
    assert (tmp_path / "torch_pypi.toml").stat().st_ino == before


def test_a_new_release_is_picked_up_and_earlier_rows_keep_their_first_seen_day(registry, tmp_path):
    _refresh(registry, tmp_path)
    path = tmp_path / "fla_pypi.toml"
    path.write_text(re.sub(r'seen = "[0-9-]+"', 'seen = "2000-01-01"', path.read_text()))

    def add_release(data):
        data["releases"]["0.7.0"] = [dict(data["releases"]["0.6.0"][-1],
                                          filename="fla_core-0.7.0-py3-none-any.whl",
                                          url="/files/fla_core-0.7.0-py3-none-any.whl")]

    registry.edits["fla-core"] = add_release
    report = _refresh(registry, tmp_path)
    assert next(o for o in report.outcomes if o.package == "fla-core").newest == "0.7.0"
    rows = {w.version: w for w in load_matrix(tmp_path).wheels if w.package == "fla-core"}
    assert "0.7.0" in rows and rows["0.7.0"].seen != "2000-01-01"
    assert "2000-01-01" in {w.seen for w in load_matrix(tmp_path).wheels if w.package in ("fla-core",
                                                                                           "flash-linear-attention")}
    assert (tmp_path / "fla_pypi.toml.prev").is_file(), "the replaced file was not kept"


def test_a_source_that_is_down_keeps_its_data_and_date(registry, tmp_path, cli_env):
    _refresh(registry, tmp_path)
    torch_before = (tmp_path / "torch_pypi.toml").read_bytes()
    fla_before = (tmp_path / "fla_pypi.toml").read_bytes()
    registry.override["/pypi/torch/json"] = (503, b"<html>Service Unavailable</html>")
    registry.override["/pypi/fla-core/json"] = (500, b"oops")  # one half of the fla file's family

    def add_release(data):
        data["releases"]["0.7.0"] = [dict(data["releases"]["0.6.0"][-1],
                                          filename="flash_linear_attention-0.7.0-py3-none-any.whl",
                                          url="/files/flash_linear_attention-0.7.0-py3-none-any.whl")]

    registry.edits["flash-linear-attention"] = add_release
    report = _refresh(registry, tmp_path)
    assert [o.package for o in report.outcomes if o.status == "unreachable"] == ["torch", "fla-core"]
    assert "HTTP 503" in _lines(report, "torch")[0]
    assert (tmp_path / "torch_pypi.toml").read_bytes() == torch_before
    # the half that answered is not written beside the half that did not: the file stays whole and old
    assert (tmp_path / "fla_pypi.toml").read_bytes() == fla_before
    state = read_state(tmp_path)
    record = state["sources"][f"{registry.index}/torch/json"]
    assert record["error"].startswith("HTTP 503") and record["changed"] <= record["error_at"]
    # fla-core is back: the fla file gets flash-linear-attention's release that came while fla-core was down
    del registry.override["/pypi/fla-core/json"]
    _refresh(registry, tmp_path)
    fla = {w.version for w in load_matrix(tmp_path).wheels if w.package == "flash-linear-attention"}
    assert "0.7.0" in fla, "a release seen while the other half of its file was down was lost"
    proc = cli(cli_env, "refresh", "--out", str(tmp_path), "--index", registry.index, "--pytorch-index",
               registry.pytorch, "--github-api", registry.github)
    assert proc.returncode == 0, proc.stderr
    assert f"✗ torch: {registry.index}/torch/json unreachable (HTTP 503 Service Unavailable): kept its data from " \
           f"{record['changed']}" in proc.stdout


def test_everything_down_is_exit_1_and_writes_nothing(tmp_path, cli_env):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead = f"http://127.0.0.1:{port}"
    proc = cli(cli_env, "refresh", "--out", str(tmp_path), "--index", f"{dead}/pypi", "--timeout", "2",
               "--pytorch-index", dead, "--github-api", dead)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("labwright: error: no registry answered") and proc.stderr.count("\n") == 1
    assert "✗ torch:" in proc.stdout and "no earlier data to keep" in proc.stdout
    assert not list(tmp_path.glob("*.toml"))


def test_a_slow_registry_is_given_up_on_within_the_timeout(registry, tmp_path):
    registry.delay["/pypi/torch/json"] = 30
    started = time.monotonic()
    report = _refresh(registry, tmp_path, timeout=1, packages=["torch"])
    elapsed = time.monotonic() - started
    assert report.failed and "timed out" in _lines(report, "torch")[0]
    assert elapsed < 20, f"a 1 s timeout took {elapsed:.1f} s to give up"


def test_malformed_json_is_one_line_and_keeps_the_file(registry, tmp_path):
    _refresh(registry, tmp_path)
    before = (tmp_path / "triton_pypi.toml").read_bytes()
    registry.override["/pypi/triton/json"] = (200, b'{"info": {"version": "3.9.0"}, "releases": {"3.9.0": [')
    report = _refresh(registry, tmp_path)
    (line,) = _lines(report, "triton")
    assert line.startswith("malformed JSON")
    assert (tmp_path / "triton_pypi.toml").read_bytes() == before
    registry.override["/pypi/triton/json"] = (200, b'{"info": {}, "releases": []}')
    report = _refresh(registry, tmp_path)
    assert "no `releases` object" in _lines(report, "triton")[0]


def test_yanked_and_pre_releases_are_left_out_with_one_line(registry, tmp_path):
    def edit(data):
        for item in data["releases"]["0.5.0"]:
            item["yanked"], item["yanked_reason"] = True, "broken import"
        data["releases"]["0.7.0rc1"] = [dict(data["releases"]["0.6.0"][-1],
                                             filename="fla_core-0.7.0rc1-py3-none-any.whl",
                                             url="/files/fla_core-0.7.0rc1-py3-none-any.whl")]

    registry.edits["fla-core"] = edit
    report = _refresh(registry, tmp_path, packages=["fla-core"])
    lines = _lines(report, "fla-core")
    assert "fla-core: yanked on PyPI, left out: 0.5.0 (broken import)" in lines
    assert "fla-core: 1 pre-release(s) left out (0.7.0rc1): pass --pre to include them" in lines
    versions = {w.version for w in load_matrix(tmp_path).wheels if w.package == "fla-core"}
    assert "0.5.0" not in versions and "0.7.0rc1" not in versions and "0.6.0" in versions
    report = _refresh(registry, tmp_path, packages=["fla-core"], pre=True)
    assert "0.7.0rc1" in {w.version for w in load_matrix(tmp_path).wheels if w.package == "fla-core"}


def test_metadata_that_contradicts_the_wheel_name_is_left_out(registry, tmp_path):
    metadata = sorted((RECORDED / "files").glob("torch-*.metadata"))[0]
    version = metadata.name.split("-")[1]
    registry.override[f"/files/{metadata.name}"] = (200, metadata.read_bytes().replace(
        f"Version: {version}".encode(), b"Version: 9.9.9"))
    report = _refresh(registry, tmp_path, packages=["torch"])
    assert any(f"metadata says version 9.9.9, its name {version}: the wheel contradicts its name" in line
               for line in _lines(report, "torch"))
    assert version not in {w.version for w in load_matrix(tmp_path).wheels if w.package == "torch"}


def test_a_wheel_listed_under_another_release_is_named(registry, tmp_path):
    def edit(data):
        wrong = dict(data["releases"]["0.6.0"][-1], filename="fla_core-0.5.9-py3-none-any.whl")
        data["releases"]["0.6.0"].append(wrong)

    registry.edits["fla-core"] = edit
    report = _refresh(registry, tmp_path, packages=["fla-core"])
    assert ("fla-core 0.6.0: fla_core-0.5.9-py3-none-any.whl is listed under release 0.6.0 but its name says 0.5.9: "
            "skipped") in _lines(report, "fla-core")


def test_built_against_reads_cuda_and_torch_pins():
    meta = ("Name: torchvision\nVersion: 0.29.2\nRequires-Dist: numpy\nRequires-Dist: torch==2.14.0\n"
            'Requires-Dist: nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"\n'
            'Requires-Dist: cuda-toolkit==13.0.2; platform_system == "Windows"\n')
    assert built_against(meta) == {"version": "0.29.2", "torch": "2.14.0", "cuda": "12.8"}


def test_show_says_how_old_each_familys_data_is(registry, tmp_path, cli_env):
    _refresh(registry, tmp_path)
    ages = data_ages(tmp_path)
    assert ages["torch"].startswith("torch@127.0.0.1:") and "changed" in ages["torch"] and "checked" in ages["torch"]
    assert "sdists only" in ages["flash-attn"]
    proc = cli(cli_env | {"LABWRIGHT_MATRIX_DIR": str(tmp_path), "COLUMNS": "250"}, "show")
    assert proc.returncode == 0, proc.stderr
    assert "torch@127.0.0.1" in proc.stdout and "data" in proc.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--index", "ftp://x"], "--index 'ftp://x': not an http(s) URL"),
    (["--kind", "pip-index"], "--kind without --from"),
    (["--package", "numpy"], "--package numpy: not a registry feed"),
    (["--timeout", "0"], "--timeout 0: give a number of seconds above 0, at most 600"),
    (["--github-api", "api.github.com"], "--github-api 'api.github.com': not an http(s) URL"),
    (["--pytorch-index", "file:///tmp"], "--pytorch-index 'file:///tmp': not an http(s) URL"),
])
def test_bad_registry_options_are_exit_2(tmp_path, cli_env, args, message):
    proc = cli(cli_env, "refresh", "--out", str(tmp_path), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir())


def test_a_corrupt_state_file_is_bad_input(tmp_path):
    (tmp_path / STATE_FILE).write_text("{not json")
    with pytest.raises(BadInput, match="registry-state.json: not the JSON"):
        read_state(tmp_path)


# -- sources outside PyPI ------------------------------------------------------------------------------------------
# download.pytorch.org and api.github.com do not resolve from this machine, so their answers cannot be recorded here.
# The stand-in builds them in the shapes their specifications give, from the file names of the committed listings
# (sources/*.txt, themselves expanded from the projects' release workflows):
# - PyTorch's index: PEP 503 (an <a href> per file, `#sha256=` fragment, PEP 592 `data-yanked`) or, when the test
#   asks, PEP 691 JSON (`files[].filename/url/hashes/yanked`, content type application/vnd.pypi.simple.v1+json).
# - GitHub's "List releases" (docs.github.com/rest/releases/releases, API 2022-11-28): a JSON list of releases with
#   `tag_name`, `draft`, `prerelease`, `assets[].name/browser_download_url/digest` ("sha256:HEX"), paginated with a
#   `Link: <...>; rel="next"` header.
SOURCES = packaged_matrix_dir() / "sources"
NEW_TORCH = "https://download.pytorch.org/whl/cu130/torch-2.15.0%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl"
YANKED_TORCH = "https://download.pytorch.org/whl/cu130/torch-2.14.0%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl"


def _listing_urls(name: str) -> list[tuple[str, str]]:
    """(url, release) per line of a committed listing."""
    out = []
    for line in (SOURCES / name).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            words = line.split()
            release = next((w.split("=", 1)[1] for w in words[1:] if w.startswith("release=")), "")
            out.append((words[0], release))
    return out


def _fake_sha(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


def _pytorch_page(state: Registry, cuda: str) -> bytes:
    urls = [u for u, _ in _listing_urls("torch.txt") if f"/whl/{cuda}/" in u]
    if cuda == "cu130":
        urls.append(NEW_TORCH)
    if state.simple_json:
        files = [{"filename": u.rsplit("/", 1)[1].replace("%2B", "+"), "url": u, "hashes": {"sha256": _fake_sha(u)}}
                 for u in urls]
        if cuda == "cu130":
            files.append({"filename": "torch-2.14.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl", "url": YANKED_TORCH,
                          "hashes": {}, "yanked": "broken build"})
        return json.dumps({"meta": {"api-version": "1.1"}, "name": "torch", "files": files}).encode()
    rows = [f'<a href="/whl/{cuda}/{u.rsplit("/", 1)[1]}#sha256={_fake_sha(u)}">{u.rsplit("/", 1)[1]}</a><br/>'
            for u in urls]
    if cuda == "cu130":
        rows.append(f'<a href="{YANKED_TORCH.split("download.pytorch.org", 1)[1]}" data-yanked="">yanked</a><br/>')
    return ("<!DOCTYPE html>\n<html><body><h1>Links for torch</h1>\n" + "\n".join(rows) + "\n</body></html>").encode()


GITHUB_LISTINGS = {"turboderp-org/exllamav3": "exllamav3.txt", "Dao-AILab/flash-attention": "flash_attn_official.txt",
                   "Dao-AILab/causal-conv1d": "causal_conv1d.txt"}


def _releases(repo: str) -> list[dict]:
    by_tag: dict[str, list[str]] = {}
    for url, release in _listing_urls(GITHUB_LISTINGS[repo]):
        tag = release or url.split("/releases/download/", 1)[1].split("/", 1)[0]
        by_tag.setdefault(tag, []).append(url)
    releases = [{"tag_name": tag, "draft": False, "prerelease": False,
                 "assets": [{"name": u.rsplit("/", 1)[1], "browser_download_url": u,
                             **({"digest": f"sha256:{_fake_sha(u)}"} if i % 2 == 0 else {})}
                            for i, u in enumerate(urls)] + [{"name": "SHA256SUMS", "browser_download_url": "x"}]}
                for tag, urls in sorted(by_tag.items(), key=lambda kv: Version(kv[0].lstrip("v")), reverse=True)]
    if repo == "turboderp-org/exllamav3":
        base = "https://github.com/turboderp-org/exllamav3/releases/download"
        releases.insert(0, {"tag_name": "v1.7.0rc1", "draft": False, "prerelease": True, "assets": [
            {"name": "x.whl", "browser_download_url":
             f"{base}/v1.7.0rc1/exllamav3-1.7.0rc1+cu130.torch2.15.0-cp312-cp312-linux_x86_64.whl"}]})
        releases.insert(0, {"tag_name": "v9.9.9", "draft": True, "assets": [
            {"name": "x.whl", "browser_download_url":
             f"{base}/v9.9.9/exllamav3-9.9.9+cu130.torch2.15.0-cp312-cp312-linux_x86_64.whl"}]})
        releases.insert(2, {"tag_name": "v1.6.5", "draft": False, "prerelease": False, "assets": [
            {"name": "exllamav3-1.6.5+cu130.torch2.15.0-cp312-cp312-linux_x86_64.whl", "browser_download_url":
             f"{base}/v1.6.5/exllamav3-1.6.5+cu130.torch2.15.0-cp312-cp312-linux_x86_64.whl"}]})
    return releases


def outside_body(state: Registry, path: str) -> tuple[int, bytes]:
    match = re.fullmatch(r"/pytorch/whl/(cu\d+)/torch/", path)
    if match and match[1] == "cu132":
        return 404, b"<html><body>404 Not Found</body></html>"
    if match:
        return 200, _pytorch_page(state, match[1])
    match = re.fullmatch(r"/github/repos/([^/]+/[^/]+)/releases\?per_page=100(?:&page=(\d+))?", path)
    if match and match[1] in GITHUB_LISTINGS:
        releases, page = _releases(match[1]), int(match[2] or 1)
        per = 8  # small pages, so that pagination is exercised
        if page * per < len(releases):
            root = state.github  # type: ignore[attr-defined]
            state.headers[path] = {"Link": f'<{root}/repos/{match[1]}/releases?per_page=100&page={page + 1}>; '
                                           f'rel="next", <{root}/repos/{match[1]}/releases?per_page=100&page=1>; '
                                           'rel="first"'}
        return 200, json.dumps(releases[(page - 1) * per:page * per]).encode()
    return 404, b'{"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}'


def _outside(report, name):
    return next(o for o in report.outside if o.package == name)


@pytest.mark.parametrize("simple_json", [False, True], ids=["pep503-html", "pep691-json"])
def test_pytorch_index_pages_give_the_cuda_builds_with_their_hashes(registry, tmp_path, simple_json):
    registry.simple_json = simple_json
    report = _refresh(registry, tmp_path, packages=["torch"])
    cu130 = _outside(report, "download.pytorch.org cu130")
    assert cu130.status == "updated" and cu130.newest == "2.15.0", cu130
    assert "1 yanked file(s) left out (PEP 592)" in cu130.lines
    # PEP 503 pages link relative to the page, so rows point at the index that answered (here the stand-in)
    rows = {w.url.rsplit("/", 1)[1]: w for w in load_matrix(tmp_path).wheels if w.source == "download.pytorch.org"}
    new = rows[NEW_TORCH.rsplit("/", 1)[1]]
    assert (new.version, new.cuda, new.python, new.source) == ("2.15.0+cu130", "13.0", "cp312", "download.pytorch.org")
    assert new.sha256 == _fake_sha(NEW_TORCH) and new.seen
    assert YANKED_TORCH.rsplit("/", 1)[1] not in rows
    assert "no such index (HTTP 404): nothing listed" in _outside(report, "download.pytorch.org cu132").lines
    listed = {u for u, _ in _listing_urls("torch.txt") if re.search(r"/whl/cu(126|128|129|130)/", u)}
    expected = {u.rsplit("/", 1)[1] for u in listed
                if Version(u.rsplit("torch-", 1)[1].split("%2B")[0]) >= Version("2.6")}
    assert expected and expected <= set(rows), sorted(expected - set(rows))[:3]
    resolution = resolve_stack(StackRequest(torch="2.15.0", cuda="13.0", python="3.12"), load_matrix(tmp_path))
    assert [c.wheel.version for c in resolution.chosen("torch")] in (["2.15.0+cu130"], ["2.15.0"]), resolution.errors


def test_github_releases_are_read_across_pages_without_drafts_or_prereleases(registry, tmp_path):
    report = _refresh(registry, tmp_path, packages=["exllamav3"])
    exl = _outside(report, "turboderp-org/exllamav3 releases")
    assert exl.status == "updated" and exl.newest == "1.6.5", exl
    assert any("pre-release(s) left out (v1.7.0rc1)" in line for line in exl.lines)
    pages = [p for p, _ in registry.requests if p.startswith("/github/repos/turboderp-org/exllamav3/")]
    assert len(pages) == -(-len(_releases("turboderp-org/exllamav3")) // 8), pages  # every page, once
    rows = {w.url: w for w in load_matrix(tmp_path).wheels if w.source == "turboderp-org/exllamav3"}
    assert not any("9.9.9" in u or "1.7.0rc1" in u for u in rows)
    new = next(w for u, w in rows.items() if "/v1.6.5/" in u)
    assert (new.torch, new.torch_build, new.cuda, new.release) == ("2.15", "2.15.0", "13.0", "v1.6.5")
    linux = [(u, r) for u, r in _listing_urls("exllamav3.txt") if "linux" in u]
    assert {u for u, _ in linux} <= set(rows), "a listed linux wheel of a release was not read"
    assert not any("win_amd64" in u for u in rows)
    with_digest = [w for w in rows.values() if w.sha256]
    assert with_digest and all(w.sha256 == _fake_sha(w.url) for w in with_digest)
    # the assets the release publishes no digest for are said, and recorded without one (never hashed here)
    assert any("wheel asset(s) without a published sha256 digest: a stack using one is refused" in line
               for line in exl.lines), exl.lines


def test_a_release_digest_pins_the_listing_row_and_a_stack_then_plans_with_it(registry, tmp_path):
    """The curated listing row (exllamav3.toml, no sha256) and the release's asset (exllamav3_github.toml, digest)
    are one row: the stack plans with the digest the release published; a wheel whose asset had none is refused."""
    import shutil

    from labwright.stacks.from_matrix import plan_for_stack

    for name in ("components.toml", "stacks.toml", "cuda.toml", "exllamav3.toml"):
        shutil.copy(packaged_matrix_dir() / name, tmp_path / name)
    _refresh(registry, tmp_path, packages=["exllamav3", "torch", "flash-linear-attention"])
    matrix = load_matrix(tmp_path)
    rows = {w.url: w for w in matrix.wheels if w.source == "turboderp-org/exllamav3"}
    pinned = [w for w in rows.values() if w.sha256]
    assert pinned and all(w.sha256 == _fake_sha(w.url) for w in pinned)
    assert any(w.origin.endswith("exllamav3.toml") for w in pinned)  # the curated row, with the release's digest
    unpinned = [w for w in rows.values() if not w.sha256 and "linux" in w.url]
    assert unpinned, "the stand-in publishes no digest for every other asset"
    plan = plan_for_stack("tabbyapi-cu12", "/opt/tabbyapi/.venv", matrix=matrix)
    exl = next(w for w in plan.wheels if w.package == "exllamav3")
    assert exl.sha256 == _fake_sha(exl.source) and "/releases/download/v1.4.2/" in exl.source
    assert all(len(w.sha256) == 64 for w in plan.wheels)
    # the release stops publishing that asset's digest: the stack is refused, naming the file and the fix
    github = tmp_path / "exllamav3_github.toml"
    github.write_text(github.read_text().replace(f', sha256 = "{exl.sha256}"', ""))
    _load.cache_clear()
    with pytest.raises(BadInput) as refused:
        plan_for_stack("tabbyapi-cu12", "/opt/tabbyapi/.venv", matrix=load_matrix(tmp_path))
    line = str(refused.value)
    assert line.startswith(f"stack tabbyapi-cu12: {exl.filename} has no recorded sha256 in {tmp_path}/exllamav3")
    assert "labwright matrix refresh" in line and "\n" not in line


def test_outside_sources_are_conditional_and_a_no_change_refresh_rewrites_nothing(registry, tmp_path):
    _refresh(registry, tmp_path, packages=["torch", "exllamav3"])
    files = {p: (p.stat().st_ino, p.read_bytes()) for p in tmp_path.glob("*.toml")}
    assert tmp_path / "torch_pytorch_org.toml" in files and tmp_path / "exllamav3_github.toml" in files
    registry.requests.clear()
    report = _refresh(registry, tmp_path, packages=["torch", "exllamav3"])
    assert {o.status for o in report.outside} == {"unchanged"}, [(o.package, o.status) for o in report.outside]
    asked = [(p, tag) for p, tag in registry.requests if p.startswith(("/pytorch/", "/github/"))]
    # every source that answered with a body is asked with its ETag (the cu132 index that 404'd has none)
    assert asked and all(tag for p, tag in asked if "/cu132/" not in p), "an outside source asked without its ETag"
    assert not report.written
    assert {p: (p.stat().st_ino, p.read_bytes()) for p in tmp_path.glob("*.toml")} == files


def test_an_outside_source_that_is_down_is_named_and_its_file_kept(registry, tmp_path, cli_env):
    _refresh(registry, tmp_path, packages=["torch"])
    before = (tmp_path / "torch_pytorch_org.toml").read_bytes()
    registry.override["/pytorch/whl/cu128/torch/"] = (503, b"down")
    registry.edits["torch"] = lambda data: data["releases"].setdefault("2.16.0", [])  # PyPI moves on meanwhile
    proc = cli(cli_env, "refresh", "--out", str(tmp_path), "--index", registry.index, "--pytorch-index",
               registry.pytorch, "--github-api", registry.github, "--package", "torch")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (f"✗ download.pytorch.org cu128: {registry.pytorch}/whl/cu128/torch/ unreachable (HTTP 503 Service "
            "Unavailable): kept its data from 20") in proc.stdout
    assert "= download.pytorch.org cu130: unchanged" in proc.stdout or "✓ download.pytorch.org cu130" in proc.stdout
    # one page of the file down: the file stays whole and as it was
    assert (tmp_path / "torch_pytorch_org.toml").read_bytes() == before
    del registry.override["/pytorch/whl/cu128/torch/"]
    report = _refresh(registry, tmp_path, packages=["torch"])
    assert not report.failed


def test_github_rate_limit_is_said_with_the_fix_and_a_token_is_sent(registry, tmp_path, monkeypatch):
    path = "/github/repos/turboderp-org/exllamav3/releases?per_page=100"
    registry.override[path] = (403, b'{"message": "API rate limit exceeded for 127.0.0.1."}')
    registry.headers[path] = {"X-RateLimit-Remaining": "0", "X-RateLimit-Limit": "60"}
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_test_token_from_the_environment")
    report = _refresh(registry, tmp_path, packages=["exllamav3"])
    line = report.unreached["turboderp-org/exllamav3 releases"]
    assert "rate limit" in line and "GITHUB_TOKEN" in line
    assert "Bearer ghp_test_token_from_the_environment" in registry.authorization
    assert not (tmp_path / "exllamav3_github.toml").exists()


def test_malformed_outside_answers_are_one_line_each(registry, tmp_path):
    registry.override["/pytorch/whl/cu126/torch/"] = (200, b"\x00\x01 not a page")
    registry.override["/github/repos/Dao-AILab/causal-conv1d/releases?per_page=100"] = (200, b"[{not json")
    report = _refresh(registry, tmp_path, packages=["torch", "causal-conv1d"])
    assert report.unreached["download.pytorch.org cu126"] == "answer is neither PEP 691 JSON nor a PEP 503 HTML page"
    assert report.unreached["Dao-AILab/causal-conv1d releases"] == "malformed JSON on page 1"


def test_a_wheel_in_a_curated_listing_and_a_refreshed_file_is_one_row(registry, tmp_path):
    registry.simple_json = True  # PEP 691 answers carry absolute URLs: the same URLs the curated listing has
    _refresh(registry, tmp_path, packages=["torch"])
    (tmp_path / "torch.toml").write_bytes((packaged_matrix_dir() / "torch.toml").read_bytes())
    wheels = load_matrix(tmp_path).wheels
    urls = [w.url for w in wheels]
    assert len(urls) == len(set(urls))
    both = next(u for u, _ in _listing_urls("torch.txt") if "/whl/cu128/torch-2.8.0" in u)
    (row,) = [w for w in wheels if w.url == both]
    assert row.sha256 == _fake_sha(both), "the curated row did not take the sha256 the refresh learned"


def _wheel_with_metadata(metadata: bytes, members: int) -> bytes:
    """A real wheel (zip): its METADATA first, then ``members`` files (many: a central directory over 64 KiB, as
    torch's with thousands of files), deflated as wheels are."""
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr("torch-2.14.1.dist-info/METADATA", metadata)
        for index in range(members):
            wheel.writestr(f"torch/include/ATen/native/generated/operator_{index:05d}_with_a_long_name.h", b"//\n")
        wheel.writestr("torch-2.14.1.dist-info/RECORD", b"")
    return out.getvalue()


@pytest.mark.parametrize("members", [10, 3000], ids=["directory-in-the-tail", "directory-fetched-apart"])
def test_a_release_without_pep658_metadata_is_read_from_its_wheel_by_range(registry, tmp_path, members):
    # PyPI serves no core metadata for torch 2.14.1's wheels (seen 2026-11-27: no "core-metadata" in the simple API,
    # .metadata 404) but answers range requests on the wheel: its METADATA is read from the zip's end record,
    # directory and that member, a few KiB of a 550 MB file, instead of leaving the release out.
    recorded = (RECORDED / "files" / "torch-2.14.0-cp312-cp312-manylinux_2_28_x86_64.whl.metadata").read_bytes()
    metadata = recorded.replace(b"Version: 2.14.0", b"Version: 2.14.1")
    wheel = "/files/torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl"
    registry.override[wheel] = (200, _wheel_with_metadata(metadata, members))
    registry.ranges.add(wheel)
    _refresh(registry, tmp_path, packages=["torch"])
    state = read_state(tmp_path)
    meta = state["built_against"]["torch==2.14.1"]
    assert meta["from"].endswith("torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl (METADATA by range)")
    assert meta["cuda"] == built_against(recorded.decode())["cuda"]
    rows = [w for w in load_matrix(tmp_path).wheels if w.package == "torch" and w.version == "2.14.1"]
    assert rows and {w.cuda for w in rows} == {meta["cuda"]}
    asked = [r for p, r in registry.range_requests if p == wheel]
    assert asked[0] == "bytes=-65536" and len(asked) == (2 if members == 10 else 3), asked
    assert len(registry.override[wheel][1]) > 65536 * (members > 10)  # the directory really lay outside the tail


def test_a_server_without_ranges_leaves_the_release_out_without_reading_the_wheel(registry, tmp_path):
    wheel = "/files/torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl"
    registry.override[wheel] = (200, b"x" * 100_000)  # served whole: a 200 to a range request
    report = _refresh(registry, tmp_path, packages=["torch"])
    torch = next(o for o in report.outcomes if o.package == "torch")
    line = next(line for line in torch.lines if "core metadata (PEP 658) not readable" in line)
    assert "2.14.1" in line and "the wheel by range: HTTP 200 to a range request" in line, line
    assert not [w for w in load_matrix(tmp_path).wheels if w.package == "torch" and w.version == "2.14.1"]


def test_a_mirror_s_path_to_a_pypi_file_is_kept_as_pypi_s_own(registry, tmp_path):
    # The PyPI this was built on answers its JSON with https://pypi.org/packages/packages/<path> for the file PyPI
    # itself names https://files.pythonhosted.org/packages/<path>; the matrix ships the latter, so the data works from
    # any machine, and a row keeps its first-seen day across the change of spelling.
    mirrored = "https://pypi.org/packages/packages/1a/2b/3c4d/fla_core-0.7.0-py3-none-any.whl"

    def add_release(data):
        data["releases"]["0.7.0"] = [dict(data["releases"]["0.6.0"][-1], filename="fla_core-0.7.0-py3-none-any.whl",
                                          url=mirrored)]

    registry.edits["fla-core"] = add_release
    _refresh(registry, tmp_path)
    path = tmp_path / "fla_pypi.toml"
    rows = {w.version: w for w in load_matrix(tmp_path).wheels if w.package == "fla-core"}
    assert rows["0.7.0"].url == "https://files.pythonhosted.org/packages/1a/2b/3c4d/fla_core-0.7.0-py3-none-any.whl"
    assert "pypi.org/packages/packages" not in path.read_text()
    # a file written before (the mirror's spelling, an old first-seen day) keeps that day
    path.write_text(path.read_text().replace("https://files.pythonhosted.org/packages/", mirrored.split("1a/")[0])
                    .replace(f'seen = "{rows["0.7.0"].seen}"', 'seen = "2000-01-01"'))
    registry.edits["fla-core"] = lambda data: (add_release(data), data["releases"].pop("0.6.0"))
    _refresh(registry, tmp_path)
    again = {w.version: w for w in load_matrix(tmp_path).wheels if w.package == "fla-core"}
    assert again["0.7.0"].seen == "2000-01-01" and again["0.7.0"].url.startswith("https://files.pythonhosted.org/")
