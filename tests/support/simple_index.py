"""A PEP 503 simple index on 127.0.0.1 over a directory, standing in for PyPI (and for the PyPI-like pages of other
publishers): ``simple/<name>/`` pages link ``files/<wheel>#sha256=<published>``; a file can be changed after its
sha256 was published (``tamper``), as a compromised mirror or a man in the middle would.

Used for the stack dependency locks and the service venvs' locks (tests/unit/deploys/test_hashed_locks.py).
"""

from __future__ import annotations

import hashlib
import http.server
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class Index:
    """The index in ``root``; ``url`` is its simple API (``http://127.0.0.1:PORT/simple/``)."""

    def __init__(self, root: Path):
        self.root = root
        self.files = root / "files"
        self.published: dict[str, str] = {}  # file name -> its sha256 (what its page publishes, unless unhashed)
        self.unhashed: set[str] = set()  # files listed without a sha256
        self.url = ""

    @property
    def base(self) -> str:
        return self.url.removesuffix("simple/")

    def file_url(self, filename: str) -> str:
        """The direct URL of a file (as a matrix row names a PyTorch-index or GitHub-release wheel)."""
        return f"{self.base}files/{filename.replace('+', '%2B')}"

    def publish(self, wheel: Path, with_hash: bool = True) -> str:
        """Put ``wheel`` on the index, its page listing it (with its sha256 unless ``with_hash`` is false); its
        sha256."""
        self.files.mkdir(parents=True, exist_ok=True)
        shutil.copy(wheel, self.files / wheel.name)
        name = wheel.name.split("-")[0].replace("_", "-").lower()
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        self.published[wheel.name] = sha
        if not with_hash:
            self.unhashed.add(wheel.name)
        page = self.root / "simple" / name
        page.mkdir(parents=True, exist_ok=True)
        links = [(p.name, "" if p.name in self.unhashed else f"#sha256={self.published[p.name]}")
                 for p in sorted(self.files.glob("*.whl")) if p.name.split("-")[0].replace("_", "-").lower() == name]
        anchors = "".join(f'<a href="../../files/{file.replace("+", "%2B")}{fragment}">{file}</a>\n'
                          for file, fragment in links)
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{anchors}</body></html>")
        return sha

    def tamper(self, filename: str) -> None:
        """The file changes on the index; the page keeps the sha256 it published."""
        path = self.files / filename
        path.write_bytes(path.read_bytes() + b"\0")


@contextmanager
def serve(root: Path) -> Iterator[Index]:
    """An Index over ``root`` (made here), served on 127.0.0.1 while the block runs."""
    served = Index(root)
    served.root.mkdir(parents=True)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             lambda *a: Quiet(*a, directory=str(served.root)))  # type: ignore[misc]
    # shutdown() waits for the loop's next poll: every 0.02 s, not the default 0.5 s
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    served.url = f"http://127.0.0.1:{server.server_address[1]}/simple/"
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
