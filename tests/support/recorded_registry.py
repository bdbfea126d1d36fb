"""A 127.0.0.1 stand-in for the registries ``labwright matrix refresh`` reads, answering with PyPI's recorded real
responses (tests/unit/matrix/recorded: ``scripts/record-registry`` records them, ``RECORDED`` says when).

- ``GET /pypi/NAME/json`` -> recorded/pypi/NAME.json; ``GET /files/FILE`` -> recorded/files/FILE (the recorded JSON's
  file URLs are ``/files/FILENAME``, core metadata as ``FILENAME.metadata``).
- Every 200 carries an ``ETag`` (a hash of the body) and a request whose ``If-None-Match`` names it gets 304, as PyPI
  answers a conditional request, so a second refresh is the no-change one.
- Anything else (the PyTorch index, GitHub's API: ``--pytorch-index ROOT/pytorch``, ``--github-api ROOT/github``)
  is 404: a source named as giving nothing, without leaving this machine.

For a benchmark or a manual run without the network (``benchmarks/matrix_refresh.py --recorded``); the unit tests
in tests/unit/matrix/test_registry.py keep their own, richer stand-in (faults, outside sources).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import threading
from pathlib import Path

RECORDED = Path(__file__).resolve().parents[1] / "unit" / "matrix" / "recorded"


class RecordedRegistry:
    """``with RecordedRegistry() as registry:`` then ``registry.index`` (``--index``), ``registry.pytorch``,
    ``registry.github``; ``requests`` counts what was asked, ``answered_304`` the conditional hits."""

    def __init__(self, recorded: Path = RECORDED, address: str = "127.0.0.1"):
        self.recorded = recorded
        self.address = address
        self.requests = 0
        self.answered_304 = 0
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None

    def body(self, path: str) -> bytes | None:
        parts = path.split("?", 1)[0].strip("/").split("/")
        if len(parts) == 3 and parts[0] == "pypi" and parts[2] == "json" and "/" not in parts[1]:
            file = self.recorded / "pypi" / f"{parts[1]}.json"
        elif len(parts) == 2 and parts[0] == "files" and parts[1] not in ("", ".", ".."):
            file = self.recorded / "files" / parts[1]
        else:
            return None
        return file.read_bytes() if file.is_file() else None

    def __enter__(self) -> RecordedRegistry:
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                with registry._lock:
                    registry.requests += 1
                body = registry.body(self.path)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    if body is None:
                        self.send_response(404)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    tag = f'"{hashlib.sha256(body).hexdigest()[:16]}"'
                    if self.headers.get("If-None-Match") == tag:
                        with registry._lock:
                            registry.answered_304 += 1
                        self.send_response(304)
                        self.send_header("ETag", tag)
                        self.end_headers()
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json" if self.path.endswith("/json")
                                     else "application/octet-stream")
                    self.send_header("ETag", tag)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

        self._server = http.server.ThreadingHTTPServer((self.address, 0), Handler)
        self._server.daemon_threads = True
        # shutdown() waits for the loop's next poll: every 0.02 s, not the default 0.5 s
        threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def root(self) -> str:
        assert self._server is not None, "use RecordedRegistry as a context manager"
        return f"http://{self.address}:{self._server.server_address[1]}"

    @property
    def index(self) -> str:
        return f"{self.root}/pypi"

    @property
    def pytorch(self) -> str:
        return f"{self.root}/pytorch"

    @property
    def github(self) -> str:
        return f"{self.root}/github"
