"""`matrix refresh` from the registry, offline: a 127.0.0.1 server answers with PyPI's recorded real responses
(recorded/RECORDED says when; scripts/record-registry re-records them), with or without ETag, slow, down or wrong."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.matrix.load import _load, read_components
from labwright.matrix.registry import FEEDS, STATE_FILE, built_against, data_ages, read_state, refresh_registry
from labwright.matrix.resolve import StackRequest, resolve_stack
from labwright.paths import packaged_matrix_dir

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

    def body(self, path: str) -> tuple[int, bytes]:
        if path in self.override:
            return self.override[path]
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
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if state.etag and status == 200:
                self.send_header("ETag", tag)
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.index = f"http://127.0.0.1:{server.server_address[1]}/pypi"  # type: ignore[attr-defined]
    yield state
    server.shutdown()
    server.server_close()


def load_matrix(root: Path):
    _load.cache_clear()  # the loader caches per directory; these tests rewrite the directory between loads
    return _load(str(root))


def cli(cli_env, *args):
    return subprocess.run(["labwright", "matrix", *args], capture_output=True, text=True, env=cli_env, timeout=300)


def _refresh(registry, out: Path, **kwargs):
    for name in ("components.toml", "cuda.toml", "stacks.toml"):  # so load_matrix(out) reads what refresh wrote
        if not (out / name).exists():
            (out / name).write_bytes((packaged_matrix_dir() / name).read_bytes())
    return refresh_registry(out, COMPONENTS, index=registry.index, timeout=kwargs.pop("timeout", 10), **kwargs)


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
    exl = [w for w in load_matrix(tmp_path).wheels if w.package == "exllamav3"]
    assert exl and all(w.platform == "any" and "JIT" in w.note for w in exl)
    assert set(report.unreached) == {"download.pytorch.org", "github.com releases"}


def test_no_change_refresh_is_conditional_and_rewrites_nothing(registry, tmp_path):
    _refresh(registry, tmp_path)
    files = {p: (p.stat().st_ino, p.read_bytes()) for p in tmp_path.glob("*.toml")}
    registry.requests.clear()
    report = _refresh(registry, tmp_path)
    assert {o.status for o in report.outcomes} == {"unchanged"}
    json_requests = [(p, tag) for p, tag in registry.requests if p.endswith("/json")]
    assert all(tag for _, tag in json_requests), f"a request without If-None-Match: {json_requests}"
    assert registry.answered_304 == len(FEEDS)
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
    assert [o.package for o in report.failed] == ["torch", "fla-core"]
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
    proc = cli(cli_env, "refresh", "--out", str(tmp_path), "--index", registry.index)
    assert proc.returncode == 0, proc.stderr
    assert f"✗ torch: {registry.index}/torch/json unreachable (HTTP 503 Service Unavailable): kept its data from " \
           f"{record['changed']}" in proc.stdout


def test_everything_down_is_exit_1_and_writes_nothing(tmp_path, cli_env):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = cli(cli_env, "refresh", "--out", str(tmp_path), "--index", f"http://127.0.0.1:{port}/pypi", "--timeout", "2")
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
