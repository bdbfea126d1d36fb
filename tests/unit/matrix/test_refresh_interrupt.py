"""Ctrl-C during `labwright matrix refresh` returns within a second or two, whatever the sources are doing, and
leaves the matrix files as they were.

The sources here are a 127.0.0.1 listener that reads each request and never answers: every fetch waits for its own
timeout (60 s here). The test sends SIGINT once the first request has arrived (an observable condition, not a
sleep) and the command must be gone within 2 s, exit 130, every file of --out byte for byte as before.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright.paths import packaged_matrix_dir
from labwright.testing.pyinfra_output import tool_env


class Silent:
    """A TCP listener that takes each connection, reads the request and answers nothing, ever."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.root = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.asked = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed at the end of the test
            self.held.append(conn)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            self.asked.set()

    def close(self) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent() -> Iterator[Silent]:
    server = Silent()
    yield server
    server.close()


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_ctrl_c_during_a_refresh_returns_at_once_and_changes_nothing(silent: Silent, tmp_path: Path) -> None:
    out = tmp_path / "matrix"
    shutil.copytree(packaged_matrix_dir(), out, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    before = _files(out)
    labwright = Path(sys.executable).parent / "labwright"
    proc = subprocess.Popen(
        [str(labwright), "matrix", "refresh", "--out", str(out), "--index", f"{silent.root}/pypi",
         "--pytorch-index", silent.root, "--github-api", silent.root, "--timeout", "60"],
        env=tool_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert silent.asked.wait(60), "the refresh never asked the source"
        proc.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        stdout, stderr = proc.communicate(timeout=30)
        elapsed = time.monotonic() - interrupted
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert elapsed < 2, f"Ctrl-C took {elapsed:.1f} s to return (the requests in flight were waited for)"
    assert proc.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr, stderr
    assert _files(out) == before
