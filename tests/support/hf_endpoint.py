"""A local HTTP stand-in for the Hugging Face Hub: the endpoints huggingface_hub's ``snapshot_download`` and
``hf_hub_download`` call, with the headers they read, so the REAL client runs against it through ``HF_ENDPOINT``.

No Hub is reachable here. Every route, header and error below is what huggingface_hub 2.4.0 (PyPI wheel
huggingface_hub-2.4.0-py3-none-any.whl) sends or reads; file + line numbers refer to that wheel:

- ``GET /api/models/{repo}/revision/{rev}`` -> the repo info JSON; huggingface_hub reads ``sha`` (the commit).
  hf_api.py 3202-3217 (``model_info``: the path, ``quote(revision, safe='')``; ``ModelInfo(**data)``; ``id`` and
  ``sha`` at 914-916); _snapshot_download.py 279-281 (``repo_info(...).sha``, asserted not None).
- ``GET /api/models/{repo}/tree/{rev}?recursive=true&expand=false`` -> a JSON list; ``type`` "file" or "directory",
  ``path``, ``size``, ``oid`` (git blob id), ``lfs`` = {``oid`` (sha256), ``size``, ``pointerSize``}. hf_api.py
  4020-4033 (``_iter_repo_tree_pages``: URL, params, ``RepoFile`` when type == "file"), 710-719 (``RepoFile``: oid ->
  blob_id, lfs oid -> sha256, pointerSize); one page (utils/_pagination.py 41-53: the next page only from a ``Link``
  header, which is not sent).
- ``HEAD|GET /{repo}/resolve/{rev}/{file}`` -> file_download.py 289-291 (``hf_hub_url``: the revision quoted with
  safe='', the filename with ``quote``). Metadata from the HEAD: 1674-1690 (``get_hf_file_metadata``):
  ``X-Repo-Commit``, ``X-Linked-Etag`` or else ``ETag`` (normalized, 606-625: ``W/`` and quotes stripped),
  ``Location`` or the request URL, ``X-Linked-Size`` or else ``Content-Length`` unless the response is a redirect.
  constants.py 94-96 name the headers. A file in git is served right there (200, ``ETag`` = its git blob id, as the
  docstring of ``hf_hub_url`` says at 268-270); a file in LFS answers 302 to the "CDN" (a second port: another
  origin, like cdn-lfs.huggingface.co, so the client stops at the 302 and takes the metadata from it: utils/_http.py
  763-782, ``_is_same_or_hub_host`` 808-810) with ``X-Linked-Etag`` = its sha256 and ``X-Linked-Size``.
- The file GET (file_download.py 334-495, ``http_get``): ``Range: bytes=N-`` on a resumed transfer (377-378), retried
  when the connection drops mid-body (``RemoteProtocolError``, 468-486); a 200 answer to a Range request restarts the
  file (403-417); the size from ``Content-Range`` else ``Content-Length`` (322-328); a short body is an error (490-495).
  Served here with 206 and ``Content-Range: bytes N-M/TOTAL`` for a Range request.
- Errors (utils/_http.py 871-953, ``hf_raise_for_status``): ``X-Error-Code: RevisionNotFound`` -> RevisionNotFoundError,
  ``EntryNotFound`` -> RemoteEntryNotFoundError, ``RepoNotFound`` -> RepositoryNotFoundError. The Hub answers a repo
  it does not show with 401 (the comment at 939-943: "401 is misleading as it is returned for private and gated repos
  if user is not authenticated [and] missing repos"); a missing entry carries ``X-Repo-Commit`` (file_download.py
  1773-1777 caches the non-existence under it).

Access, as the Hub answers it (the same headers ``hf_raise_for_status`` reads, 2.4.0 utils/_http.py 871-953; upstream
huggingface/huggingface_hub main at ee0a451, src/huggingface_hub/utils/_http.py 803-886):

- a token is ``Authorization: Bearer TOKEN`` (utils/_headers.py 119, ``build_hf_headers``); one not in ``tokens`` is
  refused on every route with 401 and ``X-Error-Message: Invalid credentials in Authorization header`` (the message
  _http.py 935 tells apart from a missing repo), no code.
- ``private``: answered as a missing repo unless the token is in ``readers``: 401 ``RepoNotFound`` without a token,
  404 with one (the 401 of the comment at _http.py 939-943).
- ``gated`` ("auto" or "manual", ``ModelInfo.gated``): the info and the tree are served to anyone (the Hub lists a
  gated repo's files: huggingface/huggingface.js#945, 2024-10); the files (resolve) and ``GET
  /api/models/{repo}/auth-check`` (hf_api.py 12047-12120, ``auth_check``) answer ``X-Error-Code: GatedRepo``
  (_http.py 888-892 -> GatedRepoError, errors.py 343-362): 401 "... You must have access to it and be authenticated
  to access it. Please log in." without a token (the Hub's message as GatedRepoError reports it, e.g.
  city96/ComfyUI_ExtraModels#99), 403 "... you are not in the authorized list. Visit URL to ask for access." with a
  token not in ``readers`` (errors.py 356-361).
- ``disabled``: 403 with ``X-Error-Message: Access to this resource is disabled.`` and no code on every route
  (_http.py 894-902 -> DisabledRepoError, errors.py 365-383).
- ``auth-check`` of a repo the token may read: 200, empty body.

Faults for tests: ``cut_once[path] = N`` sends the headers of the whole file, N bytes, then closes the connection
(once; ``cut_always`` every time); ``corrupt.add(path)`` serves the right length with wrong bytes;
``stall[path] = N`` sends N bytes, sets ``stalled`` and waits for ``release`` (once), so a test can kill the client
mid-transfer; ``refuse_file[path] = (STATUS, CODE, MESSAGE)`` answers that file's resolve with the Hub's error headers
(``X-Error-Code: CODE`` when CODE is not "", ``X-Error-Message: MESSAGE``): a refusal the client does not know.
Every request is recorded in ``requests`` (with the bearer token it carried).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import threading
from dataclasses import dataclass, field
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".onnx")  # what the Hub's default .gitattributes sends to LFS
POINTER_SIZE = 134


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(data: bytes) -> bytes:
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\n"
            f"size {len(data)}\n").encode()


@dataclass
class StandinRepo:
    repo_id: str
    files: dict[str, bytes]
    branches: dict[str, str] = field(default_factory=dict)  # branch/tag -> commit
    commit: str = ""
    gated: str = ""  # "", "auto" or "manual": the files need a token in ``readers``
    private: bool = False  # the repo itself needs a token in ``readers``
    disabled: bool = False
    readers: set[str] = field(default_factory=set)  # tokens granted access (licence accepted, or a member)

    def __post_init__(self) -> None:
        listing = json.dumps({p: hashlib.sha256(d).hexdigest() for p, d in sorted(self.files.items())})
        self.commit = self.commit or hashlib.sha1(f"{self.repo_id}\0{listing}".encode()).hexdigest()
        self.branches.setdefault("main", self.commit)

    def is_lfs(self, path: str) -> bool:
        return path.endswith(LFS_SUFFIXES) or len(self.files[path]) > 10 * 1024

    def resolve(self, revision: str) -> str | None:
        if revision == self.commit:
            return revision
        return self.branches.get(revision)

    def tree(self) -> list[dict[str, object]]:
        entries: list[dict[str, object]] = []
        directories = sorted({"/".join(p.split("/")[:i]) for p in self.files for i in range(1, p.count("/") + 1)})
        for directory in directories:
            entries.append({"type": "directory", "oid": hashlib.sha1(directory.encode()).hexdigest(), "size": 0,
                            "path": directory})
        for path, data in sorted(self.files.items()):
            entry: dict[str, object] = {"type": "file", "size": len(data), "path": path}
            if self.is_lfs(path):
                entry["oid"] = git_blob_id(lfs_pointer(data))
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                                "pointerSize": len(lfs_pointer(data))}
            else:
                entry["oid"] = git_blob_id(data)
            entries.append(entry)
        return entries


@dataclass
class Seen:
    server: str  # "hub" or "cdn"
    method: str
    path: str
    range: str | None
    token: str | None = None  # the bearer token sent, if any


class StandinHub:
    """Two threaded HTTP servers on ``address``: the Hub (API + resolve) and its "CDN" for LFS blobs."""

    def __init__(self, address: str = "127.0.0.1"):
        self.address = address
        self.repos: dict[str, StandinRepo] = {}
        self.requests: list[Seen] = []
        self.tokens: set[str] = set()  # tokens the Hub knows; any other is refused as invalid credentials
        self.cut_once: dict[str, int] = {}  # repo file path -> bytes sent before the connection is dropped (once)
        self.cut_always: dict[str, int] = {}  # repo file path -> bytes sent before every transfer is dropped
        self.corrupt: set[str] = set()  # repo file paths served with wrong bytes
        self.stall: dict[str, int] = {}  # repo file path -> bytes sent before the transfer waits for ``release``
        self.refuse_file: dict[str, tuple[int, str, str]] = {}  # repo file path -> (status, X-Error-Code, message)
        self.stalled = threading.Event()  # set when a stalled transfer has sent its bytes
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._servers: list[http.server.ThreadingHTTPServer] = []

    # --- setup ------------------------------------------------------------------------------------------------
    def add(self, repo: StandinRepo) -> StandinRepo:
        self.repos[repo.repo_id] = repo
        return repo

    def __enter__(self) -> StandinHub:
        self._servers = [self._serve("hub"), self._serve("cdn")]
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()

    @property
    def endpoint(self) -> str:
        return f"http://{self.address}:{self._servers[0].server_address[1]}"

    @property
    def cdn(self) -> str:
        return f"http://{self.address}:{self._servers[1].server_address[1]}"

    def file_gets(self) -> list[Seen]:
        """GETs of file content (resolve or CDN): what a download costs."""
        with self._lock:
            return [r for r in self.requests if r.method == "GET" and (r.server == "cdn" or "/resolve/" in r.path)]

    def reset_log(self) -> None:
        with self._lock:
            self.requests.clear()

    def _serve(self, role: str) -> http.server.ThreadingHTTPServer:
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._handle(self, role, head=True)

            def do_GET(self) -> None:
                hub._handle(self, role, head=False)

        server = http.server.ThreadingHTTPServer((self.address, 0), Handler)
        server.daemon_threads = True
        # shutdown() waits for the loop's next poll: every 0.02 s, not the default 0.5 s (1 s a test for the two)
        threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
        return server

    # --- routes -----------------------------------------------------------------------------------------------
    def _handle(self, handler: http.server.BaseHTTPRequestHandler, role: str, head: bool) -> None:
        split = urlsplit(handler.path)
        bearer = re.fullmatch(r"Bearer (\S+)", handler.headers.get("Authorization") or "")
        token = bearer[1] if bearer else None
        with self._lock:
            self.requests.append(Seen(role, handler.command, split.path, handler.headers.get("Range"), token))
        try:
            if role == "cdn":
                self._cdn(handler, split.path, head)
                return
            if token is not None and token not in self.tokens:
                self._error(handler, 401, "", "Invalid credentials in Authorization header")
                return
            match = re.fullmatch(r"/api/models/(.+)/auth-check", split.path)
            if match:
                if self._lookup(handler, unquote(match[1]), None, token, files=True) is not None:
                    self._json(handler, {}, "")
                return
            match = re.fullmatch(r"/api/models/(.+)/(revision|tree)/([^/]+)", split.path)
            if match:
                self._api(handler, unquote(match[1]), match[2], unquote(match[3]), parse_qs(split.query), token)
                return
            match = re.fullmatch(r"/(.+?)/resolve/([^/]+)/(.+)", split.path)
            if match:
                self._resolve(handler, unquote(match[1]), unquote(match[2]), unquote(match[3]), head, token)
                return
            self._error(handler, 404, "", "Not Found")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _error(self, handler: http.server.BaseHTTPRequestHandler, status: int, code: str, message: str,
               commit: str | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        handler.send_response(status)
        if code:
            handler.send_header("X-Error-Code", code)
        handler.send_header("X-Error-Message", message)
        if commit:
            handler.send_header("X-Repo-Commit", commit)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(body)

    def _lookup(self, handler: http.server.BaseHTTPRequestHandler, repo_id: str, revision: str | None,
                token: str | None, files: bool = False) -> tuple[StandinRepo, str] | None:
        """The repo and the commit ``revision`` names (the main branch's for None), or None once the refusal the Hub
        gives is sent: missing or private, disabled, gated (``files``: a file or the access check), revision."""
        repo = self.repos.get(repo_id)
        if repo is None or (repo.private and token not in repo.readers):
            self._error(handler, 404 if token else 401, "RepoNotFound", "Repository not found")
            return None
        if repo.disabled:
            self._error(handler, 403, "", "Access to this resource is disabled.")
            return None
        if files and repo.gated and token not in repo.readers:
            if token is None:
                self._error(handler, 401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have "
                            "access to it and be authenticated to access it. Please log in.")
            else:
                self._error(handler, 403, "GatedRepo", f"Access to model {repo_id} is restricted and you are not in "
                            f"the authorized list. Visit {self.endpoint}/{repo_id} to ask for access.")
            return None
        if revision is None:
            return repo, repo.commit
        commit = repo.resolve(revision)
        if commit is None:
            self._error(handler, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return None
        return repo, commit

    def _json(self, handler: http.server.BaseHTTPRequestHandler, payload: object, commit: str) -> None:
        body = json.dumps(payload).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if commit:
            handler.send_header("X-Repo-Commit", commit)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _api(self, handler: http.server.BaseHTTPRequestHandler, repo_id: str, kind: str, revision: str,
             query: dict[str, list[str]], token: str | None = None) -> None:
        found = self._lookup(handler, repo_id, revision, token)
        if found is None:
            return
        repo, commit = found
        if kind == "revision":
            self._json(handler, {"_id": commit[:24], "id": repo.repo_id, "modelId": repo.repo_id, "sha": commit,
                                 "private": repo.private, "gated": repo.gated or False, "disabled": False,
                                 "downloads": 0, "likes": 0, "tags": [],
                                 "siblings": [{"rfilename": p} for p in sorted(repo.files)]}, commit)
            return
        entries = repo.tree()
        if query.get("recursive", ["false"])[0].lower() != "true":
            entries = [e for e in entries if "/" not in str(e["path"])]
        self._json(handler, entries, commit)

    def _resolve(self, handler: http.server.BaseHTTPRequestHandler, repo_id: str, revision: str, path: str,
                 head: bool, token: str | None = None) -> None:
        found = self._lookup(handler, repo_id, revision, token, files=True)
        if found is None:
            return
        repo, commit = found
        data = repo.files.get(path)
        if path in self.refuse_file:
            status, code, message = self.refuse_file[path]
            self._error(handler, status, code, message)
            return
        if data is None:
            self._error(handler, 404, "EntryNotFound", f"{path} does not exist on \"{revision}\"", commit=commit)
            return
        if repo.is_lfs(path):
            sha256 = hashlib.sha256(data).hexdigest()
            handler.send_response(302)
            handler.send_header("Location", f"{self.cdn}/repos/{repo_id}/{sha256}?path={quote(path)}")
            handler.send_header("X-Repo-Commit", commit)
            handler.send_header("X-Linked-Etag", f'"{sha256}"')
            handler.send_header("X-Linked-Size", str(len(data)))
            handler.send_header("ETag", f'"{git_blob_id(lfs_pointer(data))}"')
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        self._send_bytes(handler, repo, path, {"X-Repo-Commit": commit, "ETag": f'"{git_blob_id(data)}"'}, head)

    def _cdn(self, handler: http.server.BaseHTTPRequestHandler, path: str, head: bool) -> None:
        match = re.fullmatch(r"/repos/(.+)/([0-9a-f]{64})", path)
        query = parse_qs(urlsplit(handler.path).query)
        repo = self.repos.get(unquote(match[1])) if match else None
        file_path = query.get("path", [""])[0]
        if repo is None or match is None or file_path not in repo.files or \
                hashlib.sha256(repo.files[file_path]).hexdigest() != match[2]:
            self._error(handler, 404, "", "Not Found")
            return
        self._send_bytes(handler, repo, file_path, {"ETag": f'"{match[2]}"'}, head)

    def _send_bytes(self, handler: http.server.BaseHTTPRequestHandler, repo: StandinRepo, path: str,
                    headers: dict[str, str], head: bool) -> None:
        data = repo.files[path]
        if path in self.corrupt:
            data = bytes(b ^ 0x5A for b in data[:64]) + data[64:]
        start = 0
        wanted = handler.headers.get("Range")
        match = re.fullmatch(r"bytes=(\d+)-", wanted or "")
        if match and int(match[1]) < len(data):
            start = int(match[1])
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            handler.send_response(200)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Accept-Ranges", "bytes")
        handler.send_header("Content-Length", str(len(data) - start))
        handler.send_header("Content-Type", "application/octet-stream")
        handler.end_headers()
        if head:
            return
        with self._lock:
            cut = self.cut_once.pop(path, self.cut_always.get(path))
            stall = self.stall.pop(path, None)
        if stall is not None:
            handler.wfile.write(data[start:start + stall])
            handler.wfile.flush()
            self.stalled.set()
            self.release.wait(timeout=300)
            start += stall
        if cut is not None:
            handler.wfile.write(data[start:start + cut])
            handler.wfile.flush()
            handler.close_connection = True
            handler.connection.shutdown(2)  # the peer sees the body end short: RemoteProtocolError, then a Range
            return
        handler.wfile.write(data[start:])
