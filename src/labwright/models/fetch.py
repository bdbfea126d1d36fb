"""Download a model with huggingface_hub, verify it against the Hub's checksums, mark it complete atomically.

This file runs where the files land (a guest, or this machine) as a script: ``python3 fetch.py ...`` with a Python
that has huggingface_hub; on this machine ``labwright model fetch REPO ...`` runs it (``python -m
labwright.models.fetch`` still works for one release, with a deprecation line). It imports nothing from labwright
(only the standard library, and huggingface_hub once a download is needed), so the deploy ships it to a guest as one
file.

    python3 fetch.py --spec '{"repo": "Qwen/Qwen3-0.6B", "revision": "main", "allow": ["*.json"], "ignore": [],
                              "file": null, "name": "Qwen3-0.6B"}' --cache /srv/models/hub --models /srv/models
    python3 fetch.py --check ...same...      # exit 0 "complete" / exit 3 "incomplete": no network, stdlib only
    python3 - --probe ...same... < fetch.py  # complete / incomplete / refused LINE: asks the Hub (stdlib only)

What it guarantees:
- ``MODELS/NAME`` (a symlink to the snapshot in the huggingface_hub cache) and ``MODELS/.labwright/NAME.json`` (the
  marker: spec digest, commit, every file's size and checksum) are written only after every file was checked against
  the Hub's own checksum: sha256 for LFS files (the tree listing's ``lfs.oid``), the git blob id for the others
  (``oid``). A file that does not match is removed from the cache and nothing is marked: a truncated or corrupted
  model is never what NAME points at. Both are replaced atomically (rename), so a reader sees the old or the new.
- A transfer cut half-way is resumed by huggingface_hub itself with a Range request (``file_download.py``
  ``http_get``, retried up to 5 times without progress); a run that still fails leaves no partial file behind
  (huggingface_hub removes its temporary) and the files already complete stay in the cache for the next run.
- A second run of the same spec finds the marker complete and downloads nothing; run again without the marker (a
  spec changed), huggingface_hub finds the files in its cache and fetches none of them again.

Exit status: 0 done, 1 failed (network, checksum, disk, a Hub refusal it does not know: its own code and message), 2
bad input (repo, revision or file not on the Hub, a gated repo whose licence is not accepted or no token, a disabled
repo, a token the Hub refuses, a name already taken), 3 (--check only) not complete. Errors are one line on stderr:
the Hub's ``X-Error-Code`` / ``X-Error-Message`` headers are read for every request (``hub_refusal``) and each known
code is one line naming the repo and the fix.

Progress is on stdout, so that stderr stays the one error line: when bytes are to come (files not already in the
cache), ``… download REPO@REVISION (N files, X MB)`` first, then a line every ``LABWRIGHT_PROGRESS_INTERVAL``
seconds (default 10) with the megabytes come so far of the total and the rate (measured on the cache's blob files,
huggingface_hub's ``*.incomplete`` ones included), and ``✓ download ... (TIME): X MB at R MB/s`` at the end (``✗
... failed after TIME`` before the error line). ``LABWRIGHT_PROGRESS=off`` silences it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

MARKER_DIR = ".labwright"
COMMIT = re.compile(r"[0-9a-f]{40}")
CHUNK = 1 << 20
EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INCOMPLETE = 1, 2, 3


class Refused(Exception):
    """One line for stderr, and the exit status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def spec_digest(spec: dict[str, Any]) -> str:
    """Must equal labwright.models.spec.ModelSpec.digest for the same spec."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def marker_path(models: Path, name: str) -> Path:
    return models / MARKER_DIR / f"{name}.json"


def file_checksum(path: Path, algorithm: str) -> str:
    """``sha256`` of the bytes, or ``git-sha1``: git's blob id, sha1 of ``blob SIZE\\0`` + bytes (what the Hub's tree
    listing gives as ``oid`` for a file that is not in LFS)."""
    digest = hashlib.sha256() if algorithm == "sha256" else hashlib.sha1()
    if algorithm != "sha256":
        digest.update(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(target: Path, text: str) -> None:
    """Temp file beside the target, fsync, rename, fsync the directory: the old content or the new, never a mix."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, target)
    _fsync_dir(target.parent)


def link_atomic(link: Path, target: str) -> None:
    """Point ``link`` at ``target`` (relative) by renaming a new symlink over it."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}.link")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(target, tmp)
    os.replace(tmp, link)
    _fsync_dir(link.parent)


def is_complete(models: Path, spec: dict[str, Any]) -> bool:
    """The marker names this spec, NAME points at the snapshot it verified, and every file it lists is there with
    its size. Reads only: no network, no hashing (the hashes were checked when the marker was written)."""
    try:
        marker = json.loads(marker_path(models, spec["name"]).read_text(encoding="utf-8"))
        link = models / spec["name"]
        if marker.get("digest") != spec_digest(spec) or os.readlink(link) != marker["snapshot"]:
            return False
        snapshot = models / marker["snapshot"]
        return all((snapshot / rel).is_file() and (snapshot / rel).stat().st_size == entry["size"]
                   for rel, entry in marker["files"].items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):  # not the marker: fetch again
        return False


def _check_name_free(models: Path, name: str) -> None:
    link = models / name
    if link.exists() and not link.is_symlink():
        raise Refused(f"model_name: {link} exists and is not a link labwright made: move it away or choose another "
                      "model_name (nothing was downloaded)", EXIT_BAD_INPUT)


# The Hub says why it refused a request in two headers, ``X-Error-Code`` and ``X-Error-Message``; huggingface_hub turns
# them into its exception classes in ``hf_raise_for_status`` (huggingface_hub 2.4.0, the pinned client:
# utils/_http.py 871-953, errors.py 313-465; upstream huggingface/huggingface_hub main at ee0a451 (1.29.0.dev0):
# src/huggingface_hub/utils/_http.py 803-886, errors.py 301-453). ``hub_refusal`` reads the same headers, for every
# request labwright makes (the probe's stdlib requests and huggingface_hub's, through the exception's response).
DISABLED_MESSAGE = "Access to this resource is disabled."  # _http.py 894 (2.4.0): the message alone marks it
BAD_TOKEN_MESSAGE = "Invalid credentials in Authorization header"  # _http.py 935 (2.4.0): a 401 that is the token


def _one_header(headers: Any, name: str) -> str:
    value = headers.get(name) if headers is not None else None
    return " ".join(str(value).split())[:300] if value else ""


def _entry_of(url: str) -> str:
    from urllib.parse import unquote

    match = re.search(r"/resolve/[^/?]+/([^?#]+)", url)
    return unquote(match[1]) if match else ""


def hub_refusal(status: int, headers: Any, spec: dict[str, Any], where: str, token_sent: bool,
                url: str = "") -> Refused | None:
    """The one line for the Hub's refusal of one request (``status`` and the answer's ``headers``, anything with a
    case-insensitive ``get``), or None when the answer does not say why (no ``X-Error-Code``/``X-Error-Message``: a
    network or proxy failure, a server error, a mirror's bare 404; the caller reports it as such).

    Bad input (exit 2, naming the data key and the fix): ``GatedRepo`` (accept the licence on the model's page, give
    a token of that account in HF_TOKEN; it says whether a token was sent), ``RepoNotFound`` or a 401 that is not the
    token's fault (the name, or a private repo without a token that can read it: the Hub answers both alike),
    ``RevisionNotFound``, ``EntryNotFound`` for the spec's file, a disabled repo, a token the Hub refuses. Any other
    code (or a 4xx with only a message) is exit 1 with the Hub's own code and message."""
    if status < 400:
        return None
    code, message = _one_header(headers, "X-Error-Code"), _one_header(headers, "X-Error-Message")
    where = where.rstrip("/")
    repo, revision = spec["repo"], spec["revision"]
    page = f"{where}/{repo}"
    token = "a token was sent" if token_sent else "no token was sent: HF_TOKEN is not set"

    def bad(line: str) -> Refused:
        return Refused(f"{line}; nothing was downloaded", EXIT_BAD_INPUT)

    if code == "GatedRepo":
        if token_sent:
            return bad(f"model_repo: {repo!r} is gated on {where} and the token sent (HF_TOKEN) has no access to it "
                       f"yet: accept its licence on {page} logged in as the token's account (a gate its authors "
                       "approve by hand also waits for them), then re-run")
        return bad(f"model_repo: {repo!r} is gated on {where} ({token}): accept its licence on {page}, then give a "
                   "token of that account in HF_TOKEN and re-run")
    if message == DISABLED_MESSAGE:
        return bad(f"model_repo: {repo!r} is disabled on {where} (the Hub: {message!r}; its page {page} may say "
                   "why): choose another repo")
    if code == "RevisionNotFound":
        return bad(f"model_revision: {revision!r} is not a branch, tag or commit of {repo} on {where}")
    if code == "EntryNotFound" and spec.get("file"):
        return bad(f"model_file: {spec['file']!r} is not a file of {repo}@{revision} on {where}")
    if code == "RepoNotFound" or (not code and status == 401 and message != BAD_TOKEN_MESSAGE):
        access = ("the token sent cannot read it" if token_sent else token)
        return bad(f"model_repo: {repo!r} is not a repo on {where}, or one this machine may not read: check the "
                   f"name ({page} is its page); a private repo needs a token of an account that can read it in "
                   f"HF_TOKEN ({access})")
    if message == BAD_TOKEN_MESSAGE:
        return bad(f"HF_TOKEN: {where} refused the token sent ({message!r}): give a valid token of the account "
                   f"that may read {repo}, or none for a public repo")
    if code or (message and status < 500):
        entry = f" ({_entry_of(url)})" if _entry_of(url) else ""
        return Refused(f"download of {repo}@{revision} from {where} failed: the Hub answered {status}"
                       f"{' ' + code if code else ''}{entry}: {message or 'no message'} (nothing was marked complete; "
                       "re-run to continue)", EXIT_FAILED)
    return None


#: The labwright modules this runner reads its environment through, carried in its own text where labwright is not
#: installed (a guest): ``deploys/model.py``'s ``runner_source`` fills this in with their sources (module name ->
#: source); run from an installed labwright (``labwright model fetch``, the tests) it stays empty and they import.
CARRIED: dict[str, str] = {}


def labwright_env() -> Any:
    """:mod:`labwright.schema.env` (every environment variable labwright reads, declared once; standard library
    only): imported where labwright is installed, else made from :data:`CARRIED`."""
    try:
        from labwright.schema import env
    except ImportError:
        if not CARRIED:
            raise
        import types

        for name, source in CARRIED.items():
            module = types.ModuleType(name)
            if name.count(".") < 2:  # labwright, labwright.schema: packages
                module.__path__ = []
            sys.modules[name] = module
            if "." in name:
                parent, _, child = name.rpartition(".")
                setattr(sys.modules[parent], child, module)
            exec(compile(source, f"<carried {name}>", "exec"), module.__dict__)
        from labwright.schema import env
    return env


def hub_token() -> str | None:
    """The token huggingface_hub sends (2.4.0 utils/_auth.py 60-86 ``get_token``, 147-156, 453-460: ``HF_TOKEN``,
    else ``HUGGING_FACE_HUB_TOKEN``, else the token file; constants.py 159-168 and 250-257 put the file at
    ``HF_TOKEN_PATH``, else ``HF_HOME/token``, ``HF_HOME`` defaulting to ``XDG_CACHE_HOME/huggingface`` or
    ``~/.cache/huggingface``), so the probe asks with the token the download will use. The variables are read
    through labwright.schema.env, as labwright's CLI reads them: a token with a line break inside (it would reach
    the Authorization header) is Refused, one line naming the variable, exit 2."""
    env = labwright_env()
    try:
        for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
            value = env.read(name)
            if value:
                return str(value)
        home = env.read("HF_HOME") or os.path.join(
            env.read("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
        path = env.read("HF_TOKEN_PATH") or os.path.join(os.path.expanduser(os.path.expandvars(home)), "token")
    except env.BadInput as exc:
        raise Refused(str(exc).replace("(nothing was contacted)", "(nothing was downloaded)"), EXIT_BAD_INPUT) from None
    try:
        value = Path(os.path.expanduser(os.path.expandvars(path))).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return value.replace("\r", "").replace("\n", "").strip() or None


# huggingface_hub's exceptions without a response to read (2.4.0 errors.py): what the Hub's code was.
_CODES_BY_CLASS = {"GatedRepoError": "GatedRepo", "RepositoryNotFoundError": "RepoNotFound",
                   "RevisionNotFoundError": "RevisionNotFound", "RemoteEntryNotFoundError": "EntryNotFound"}


def refusal_of(exc: BaseException, spec: dict[str, Any], where: str) -> Refused | None:
    """``hub_refusal`` for a huggingface_hub error: the Hub's answer is the ``response`` of the error or of one it was
    raised from (hf_hub_download wraps some HEAD failures in LocalEntryNotFoundError: 2.4.0 file_download.py
    1932-1967); whether a token was sent is read off the request itself."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            break
        response = getattr(seen, "response", None)
        status = getattr(response, "status_code", None)
        if isinstance(status, int):
            try:
                sent = bool(response.request.headers.get("authorization"))  # type: ignore[union-attr]
            except (AttributeError, RuntimeError):
                sent = hub_token() is not None
            refusal = hub_refusal(status, getattr(response, "headers", None), spec, where, sent,
                                  str(getattr(response, "url", "") or ""))
            if refusal is not None:
                return refusal
        seen = seen.__cause__ or seen.__context__
    for cls in type(exc).__mro__:
        if cls.__name__ in _CODES_BY_CLASS:
            return hub_refusal(404, {"X-Error-Code": _CODES_BY_CLASS[cls.__name__]}, spec, where,
                               hub_token() is not None)
    return None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a file in LFS answers 302 to its CDN: the answer itself is what is asked


def preflight(spec: dict[str, Any], endpoint: str | None, timeout: float = 30) -> bool:
    """Ask the Hub whether the repo, the revision and (for one file) the file exist and may be read, with the standard
    library only, before anything is installed: the requests huggingface_hub makes first
    (``/api/models/REPO/revision/REV``; a HEAD of ``/REPO/resolve/REV/FILE``) and the Hub's access check
    (``/api/models/REPO/auth-check``, huggingface_hub 2.4.0 hf_api.py 12047-12120 ``auth_check``: the Hub shows a
    gated repo's info and tree to anyone and refuses only its files). Sends the token the download will send.
    Raises Refused (``hub_refusal``) for an answer that names what is missing or refused; False when the Hub could not
    be asked (the download step then says why), True when all is there."""
    from urllib.parse import quote

    where = (endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    repo, revision = spec["repo"], spec["revision"]
    headers = {"User-Agent": "labwright-models-preflight"}
    token = hub_token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    asks = [("GET", f"{where}/api/models/{repo}/revision/{quote(revision, safe='')}"),
            ("GET", f"{where}/api/models/{repo}/auth-check")]
    if spec.get("file"):
        asks.append(("HEAD", f"{where}/{repo}/resolve/{quote(revision, safe='')}/{quote(spec['file'])}"))
    opener = urllib.request.build_opener(_NoRedirect)
    for method, url in asks:
        try:
            with opener.open(urllib.request.Request(url, method=method, headers=headers), timeout=timeout):
                pass
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                continue
            check = url.endswith("/auth-check")
            said = exc.headers.get("X-Error-Code") or exc.headers.get("X-Error-Message")
            refusal = hub_refusal(exc.code, exc.headers, spec, where, token is not None, url) \
                if said or not check else None
            if refusal is not None and refusal.status == EXIT_BAD_INPUT:
                raise refusal from None
            if check:
                continue  # a mirror without the route, or a refusal the download reports: the file is still asked
            return False
        except (OSError, ValueError):
            return False
    return True


def remove_orphaned_partials(cache: Path, repo: str) -> list[Path]:
    """Remove the ``blobs/ETAG.XXXXXXXX.incomplete`` files of downloads that were killed (SIGKILL, power cut: their
    ``finally`` never ran). huggingface_hub holds ``.locks/REPO_FOLDER/ETAG.lock`` while it writes one
    (file_download.py 1244-1300, 2004); a partial whose lock can be taken now has no writer left, in this guest or
    another one sharing the cache."""
    from filelock import FileLock, Timeout

    folder = "models--" + repo.replace("/", "--")  # file_download.py 747-756, repo_folder_name
    removed: list[Path] = []
    blobs = cache / folder / "blobs"
    if not blobs.is_dir():
        return removed
    for partial in blobs.glob("*.incomplete"):
        lock = FileLock(str(cache / ".locks" / folder / f"{partial.name.split('.')[0]}.lock"), timeout=0)
        try:
            with lock:
                partial.unlink(missing_ok=True)
                removed.append(partial)
        except (Timeout, OSError):
            continue
    return removed


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's own errors: httpx2 for huggingface_hub 2.x, httpx for 1.x, requests before."""
    for module_name, attribute in (("httpx2", "HTTPError"), ("httpx", "HTTPError"), ("requests", "RequestException")):
        try:
            module = __import__(module_name)
        except ImportError:
            continue
        return (getattr(module, attribute),)
    return ()


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:2])[:300] if lines else type(exc).__name__


def _duration(seconds: float) -> str:
    """As labwright.ui.format_duration (this file imports nothing from labwright)."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _interval() -> float:
    try:
        value = float(os.environ.get("LABWRIGHT_PROGRESS_INTERVAL", "10"))
    except ValueError:
        return 10.0
    return max(value, 0.2) if 0 <= value <= 86400 else 10.0


def blobs_dir(cache: Path, repo: str) -> Path:
    """Where huggingface_hub keeps a model repo's files (file_download.py ``repo_folder_name``: ``models--ORG--NAME``,
    then ``blobs/``, each file named by its sha256 (LFS) or git blob id, ``.incomplete`` while it comes)."""
    return cache / f"models--{repo.replace('/', '--')}" / "blobs"


def _blob_bytes(blobs: Path) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(blobs):
            with contextlib.suppress(OSError):
                total += entry.stat(follow_symlinks=False).st_size
    return total


class DownloadProgress:
    """Lines on stdout while a model's files come (see the module docstring): a thread measures the blob directory
    every interval. Nothing at all when no byte is to come (every file already in the cache)."""

    def __init__(self, what: str, blobs: Path, missing: int, files: int, out: Any = None):
        self.what, self.blobs, self.missing, self.files = what, blobs, missing, files
        self.out = out if out is not None else sys.stdout
        self.quiet = missing <= 0 or os.environ.get("LABWRIGHT_PROGRESS", "").strip().lower() == "off"
        self.interval = _interval()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.began = time.monotonic()
        self.base = 0

    def _print(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            print(text, file=self.out, flush=True)

    def _come(self) -> int:
        return max(0, _blob_bytes(self.blobs) - self.base)

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            come = min(self._come(), self.missing)
            seconds = time.monotonic() - self.began
            self._print(f"… {self.what}: {come / 1e6:.1f} of {self.missing / 1e6:.1f} MB "
                        f"({100 * come // self.missing}%), {come / 1e6 / max(seconds, 1e-3):.1f} MB/s "
                        f"[{_duration(seconds)}]")

    def __enter__(self) -> DownloadProgress:
        if self.quiet:
            return self
        self.base = _blob_bytes(self.blobs)
        self.began = time.monotonic()
        self._print(f"… {self.what} ({self.files} file(s), {self.missing / 1e6:.1f} MB)")
        self._thread = threading.Thread(target=self._tick, name="labwright-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        seconds = time.monotonic() - self.began
        if kind is None:
            come = self._come()
            self._print(f"✓ {self.what} ({_duration(seconds)}): {come / 1e6:.1f} MB at "
                        f"{come / 1e6 / max(seconds, 1e-3):.1f} MB/s")
        else:
            self._print(f"✗ {self.what} failed after {_duration(seconds)}")


def _to_come(tree: dict[str, Any], wanted: list[str], blobs: Path) -> tuple[int, int]:
    """(bytes, files) of ``wanted`` that are not whole in the cache's blobs yet."""
    missing = files = 0
    for rel in wanted:
        entry = tree.get(rel)
        if entry is None:
            continue
        name, size = (entry.lfs.sha256, entry.lfs.size) if entry.lfs is not None else (entry.blob_id, entry.size)
        try:
            whole = (blobs / name).stat().st_size == size
        except OSError:
            whole = False
        if not whole:
            missing += size or 0
            files += 1
    return missing, files


def download(spec: dict[str, Any], cache: Path, models: Path, endpoint: str | None) -> dict[str, Any]:
    """Download, verify, mark complete; returns the marker. Raises Refused."""
    hub_token()  # huggingface_hub reads the same variables: a bad one is refused here, before the Hub is asked
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    # huggingface_hub's 10 s defaults (constants.py 310-314) fail a HEAD or stall a read on a busy guest or a slow
    # link; a stalled read is retried with a Range request, so a longer wait costs nothing when all is well.
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "30")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "60")
    if not sys.stderr.isatty():  # its tqdm bars redraw with \r: in a pyinfra log or a pipe they are noise
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import filter_repo_objects, logging

    logging.set_verbosity_error()
    failures: tuple[type[BaseException], ...] = (HfHubHTTPError, LocalEntryNotFoundError, OSError,
                                                  *_transport_errors())
    repo, revision, name = spec["repo"], spec["revision"], spec["name"]
    # The endpoint is passed on every call: huggingface_hub reads HF_ENDPOINT once, when it is first imported
    # (constants.py), so a process that imported it before the variable was set would otherwise ask huggingface.co.
    where = endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    _check_name_free(models, name)
    remove_orphaned_partials(cache, repo)
    api = HfApi(endpoint=where)
    try:
        # Resolve a branch or tag once, so the listing, the files and the marker all name the same commit.
        commit = revision if COMMIT.fullmatch(revision) else api.repo_info(repo, revision=revision).sha
        assert commit is not None
        tree = {entry.path: entry for entry in api.list_repo_tree(repo, recursive=True, revision=commit)
                if isinstance(entry, RepoFile)}
        if spec.get("file"):
            wanted = [spec["file"]]
        else:
            wanted = list(filter_repo_objects(tree, allow_patterns=spec.get("allow") or None,
                                              ignore_patterns=spec.get("ignore") or None))
            if not wanted:
                raise Refused(f"model_allow/model_ignore: no file of {repo}@{revision} matches (its files: "
                              f"{', '.join(sorted(tree)[:8]) or 'none'}); nothing was downloaded", EXIT_BAD_INPUT)
        blobs = blobs_dir(cache, repo)
        missing, count = _to_come(tree, wanted, blobs)
        with DownloadProgress(f"download {repo}@{revision}", blobs, missing, count):
            if spec.get("file"):
                local = hf_hub_download(repo, spec["file"], revision=commit, cache_dir=str(cache),
                                        endpoint=where)
                snapshot = Path(local).parents[len(Path(spec["file"]).parts) - 1]
            else:
                snapshot = Path(snapshot_download(repo, revision=commit, cache_dir=str(cache), endpoint=where,
                                                  allow_patterns=spec.get("allow") or None,
                                                  ignore_patterns=spec.get("ignore") or None, max_workers=4))
    except failures as exc:
        refusal = refusal_of(exc, spec, where)  # the Hub's X-Error-Code / X-Error-Message, when it said why
        if refusal is not None:
            raise refusal from None
        raise Refused(f"download of {repo}@{revision} from {where} failed: {_one_line(exc)} (files completed so far "
                      "stay in the cache; nothing was marked complete; re-run to continue)", EXIT_FAILED) from None

    files: dict[str, dict[str, Any]] = {}
    bad: list[str] = []
    for rel in wanted:
        entry, path = tree.get(rel), snapshot / rel
        if entry is None:
            raise Refused(f"{repo}@{commit}: {rel} was downloaded but is not in the repo's tree listing; nothing was "
                          "marked complete", EXIT_FAILED)
        algorithm, expected = ("sha256", entry.lfs.sha256) if entry.lfs is not None else ("git-sha1", entry.blob_id)
        size = entry.lfs.size if entry.lfs is not None else entry.size
        actual = file_checksum(path, algorithm) if path.is_file() else "missing"
        if actual != expected or path.stat().st_size != size:
            bad.append(f"{rel} ({algorithm} {actual[:12]}, the Hub says {expected[:12]})")
            blob = path.resolve()
            for victim in (path, blob):
                with contextlib.suppress(OSError):
                    victim.unlink()
            continue
        files[rel] = {"size": size, algorithm: expected}
    if bad:
        raise Refused(f"checksum mismatch in {repo}@{commit}: {'; '.join(bad)}: removed from the cache, nothing was "
                      "marked complete (re-run to download again)", EXIT_FAILED)

    relative = os.path.relpath(snapshot, models)
    marker = {"spec": spec, "digest": spec_digest(spec), "commit": commit, "endpoint": where,
              "snapshot": relative, "files": files, "verified_at": int(time.time())}
    write_atomic(marker_path(models, name), json.dumps(marker, indent=1, sort_keys=True) + "\n")
    link_atomic(models / name, relative)
    return marker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fetch.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", required=True, help="the model spec as JSON (labwright.models.spec.ModelSpec)")
    parser.add_argument("--cache", required=True, type=Path, help="the huggingface_hub cache directory")
    parser.add_argument("--models", required=True, type=Path, help="where MODELS/NAME links to the snapshot")
    parser.add_argument("--endpoint", default=None, help="the Hub URL (default: HF_ENDPOINT, else huggingface.co)")
    parser.add_argument("--check", action="store_true", help="only say whether the model is complete (exit 0 or 3)")
    parser.add_argument("--probe", action="store_true",
                        help="print 'complete', 'incomplete' or 'refused LINE' (the Hub asked, stdlib only); exit 0")
    args = parser.parse_args(argv)
    try:
        spec = json.loads(args.spec)
        if not isinstance(spec, dict) or not {"repo", "revision", "name"} <= set(spec):
            raise ValueError("needs repo, revision and name")
    except ValueError as exc:
        print(f"--spec: not a model spec ({exc}); give the JSON of labwright.models.spec.ModelSpec.as_json()",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    if is_complete(args.models, spec):
        print("complete" if args.probe else
              f"complete: {args.models / spec['name']} ({spec['repo']}@{spec['revision']}), nothing downloaded")
        return 0
    if args.check:
        print(f"incomplete: {args.models / spec['name']}")
        return EXIT_INCOMPLETE
    if args.probe:
        try:
            preflight(spec, args.endpoint)
        except Refused as exc:
            print(f"refused {exc}")
            return 0
        print("incomplete")
        return 0
    try:
        args.models.mkdir(parents=True, exist_ok=True)
        args.cache.mkdir(parents=True, exist_ok=True)
        marker = download(spec, args.cache, args.models, args.endpoint)
    except Refused as exc:
        print(str(exc), file=sys.stderr)
        return exc.status
    except ImportError as exc:
        print(f"huggingface_hub is not importable by {sys.executable} ({exc}): install it in this Python's venv",
              file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        print(f"{args.models}: {exc.strerror or exc} (nothing was marked complete)", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted: nothing was marked complete; re-run to continue", file=sys.stderr)
        return 130
    total = sum(entry["size"] for entry in marker["files"].values())
    print(f"downloaded: {args.models / spec['name']} -> {marker['snapshot']} ({len(marker['files'])} files, "
          f"{total} bytes, commit {marker['commit'][:12]}, checksums verified)")
    return 0


if __name__ == "__main__":
    if __spec__ is not None and __spec__.name == "labwright.models.fetch":  # python -m, not the file a guest runs
        print("labwright: deprecated: python -m labwright.models.fetch is labwright model fetch now; the old spelling "
              "goes in the next release", file=sys.stderr)
    sys.exit(main())
