"""Wheel fetching with hash checks and health probes, against real files and a real loopback HTTP server."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright.errors import BadInput, SafetyCheckFailed
from labwright.stacks.fetch import fetch
from labwright.stacks.plan import PlannedWheel
from labwright.stacks.service import HealthCheck, check_health, check_unit, probe, wait_healthy


class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/unhealthy":
            self.send_response(503)
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "served"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: Handler(*a, directory=str(root)))
    # shutdown() waits for the loop's next poll: every 0.02 s, not the default 0.5 s
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", root
    httpd.shutdown()


def wheel_file(directory: Path, name: str = "torch-2.9.0-cp311-cp311-linux_x86_64.whl") -> tuple[Path, str]:
    path = directory / name
    path.write_bytes(b"not really a wheel, but bytes to hash")
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_local_wheel_is_hashed_in_place(tmp_path):
    path, sha = wheel_file(tmp_path)
    got = fetch(PlannedWheel("torch", "2.9.0", path.name, str(path), sha), tmp_path / "dl", print)
    assert got.path == path and got.checked and got.sha256 == sha
    by_uri = fetch(PlannedWheel("torch", "2.9.0", path.name, path.as_uri(), sha), tmp_path / "dl", print)
    assert by_uri.sha256 == sha and by_uri.checked


def test_a_wheel_without_a_recorded_sha256_is_never_hashed_on_arrival(tmp_path, server):
    """No sha256 in the plan: refused in one line before the file is read or downloaded (nothing asked of the
    server, nothing written)."""
    base, served = server
    path, _ = wheel_file(tmp_path)
    (served / path.name).write_bytes(path.read_bytes())
    for source in (str(path), path.as_uri(), f"{base}/{path.name}"):
        with pytest.raises(BadInput) as info:
            fetch(PlannedWheel("torch", "2.9.0", path.name, source), tmp_path / "dl", print)
        line = str(info.value)
        assert "no sha256 in the plan" in line and "labwright matrix refresh" in line and "\n" not in line
    assert not (tmp_path / "dl").exists()


def test_a_sha256_that_differs_stops_the_switch(tmp_path):
    path, _ = wheel_file(tmp_path)
    with pytest.raises(SafetyCheckFailed) as info:
        fetch(PlannedWheel("torch", "2.9.0", path.name, str(path), "0" * 64), tmp_path / "dl", print)
    assert "the matrix says 0000" in str(info.value) and "\n" not in str(info.value)


def test_a_missing_wheelhouse_file_names_the_directory(tmp_path):
    with pytest.raises(BadInput, match="the wheelhouse .* does not exist"):
        fetch(PlannedWheel("torch", "2.9.0", "t.whl", str(tmp_path / "nowhere" / "t.whl"), "0" * 64), tmp_path, print)


def test_downloads_are_hashed_on_the_way_and_a_404_is_one_line(server, tmp_path):
    base, served = server
    _, sha = wheel_file(served, "torch-2.9.0+cu128-cp311-cp311-linux_x86_64.whl")
    url = f"{base}/torch-2.9.0%2Bcu128-cp311-cp311-linux_x86_64.whl"
    got = fetch(PlannedWheel("torch", "2.9.0+cu128", "torch-2.9.0+cu128-cp311-cp311-linux_x86_64.whl", url, sha),
                tmp_path / "dl", print)
    assert got.path.parent == tmp_path / "dl" and got.checked
    with pytest.raises(BadInput) as info:
        fetch(PlannedWheel("torch", "2.9.0", "gone.whl", f"{base}/gone.whl", sha), tmp_path / "dl", print)
    assert "answered HTTP 404" in str(info.value) and "\n" not in str(info.value)


def test_health_by_url_and_by_command(server):
    base, served = server
    (served / "health").write_text("ok")
    assert probe(HealthCheck(url=f"{base}/health")) == (True, "HTTP 200")
    assert probe(HealthCheck(url=f"{base}/unhealthy")) == (False, "HTTP 503")
    ok, seen = probe(HealthCheck(url="http://127.0.0.1:9/health"))  # the discard port: nothing listens
    assert not ok and "refused" in seen.lower()
    assert probe(HealthCheck(command="exit 0"))[0]
    assert probe(HealthCheck(command="echo broken; exit 3")) == (False, "exit 3: broken")
    healthy, _, waited = wait_healthy(HealthCheck(command="false", timeout_s=0.3))
    assert not healthy and 0.3 <= waited < 2


@pytest.mark.parametrize("bad", [HealthCheck(url="ftp://x/health"), HealthCheck(url="http://a", command="true"),
                                 HealthCheck(url="http://a", timeout_s=0)])
def test_bad_health_options(bad):
    with pytest.raises(BadInput):
        check_health(bad)


def test_unit_names():
    assert check_unit("tabbyapi") == "tabbyapi.service"
    assert check_unit("llama@1.service") == "llama@1.service"
    with pytest.raises(BadInput, match="not a systemd unit name"):
        check_unit("tabby api; reboot")
