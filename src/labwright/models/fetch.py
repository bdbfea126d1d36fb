"""Download a model with huggingface_hub, verify it against the Hub's checksums, mark it complete atomically.

This file runs where the files land (a guest, or this machine) as a script: ``python3 fetch.py ...`` with a Python
that has huggingface_hub, or ``python -m labwright.models.fetch``. It imports nothing from labwright (only the standard
library, and huggingface_hub once a download is needed), so the deploy ships it to a guest as one file.

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

Exit status: 0 done, 1 failed (network, checksum, disk), 2 bad input (repo, revision or file not on the Hub, a name
already taken), 3 (--check only) not complete. Errors are one line on stderr.

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
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _check_name_free(models: Path, name: str) -> None:
    link = models / name
    if link.exists() and not link.is_symlink():
        raise Refused(f"model_name: {link} exists and is not a link labwright made: move it away or choose another "
                      "model_name (nothing was downloaded)", EXIT_BAD_INPUT)


def _not_found(error_code: str, spec: dict[str, Any], where: str) -> Refused:
    """The one line for the Hub's ``X-Error-Code`` (huggingface_hub 2.4.0 utils/_http.py 880-953 maps the same)."""
    repo, revision = spec["repo"], spec["revision"]
    if error_code == "RevisionNotFound":
        message = f"model_revision: {revision!r} is not a branch, tag or commit of {repo} on {where}"
    elif error_code == "EntryNotFound":
        message = f"model_file: {spec.get('file')!r} is not a file of {repo}@{revision} on {where}"
    else:
        message = f"model_repo: {repo!r} is not a repo on {where}, or it is private or gated (give a token in HF_TOKEN)"
    return Refused(f"{message}; nothing was downloaded", EXIT_BAD_INPUT)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a file in LFS answers 302 to its CDN: the answer itself is what is asked


def preflight(spec: dict[str, Any], endpoint: str | None, timeout: float = 30) -> bool:
    """Ask the Hub whether the repo, the revision and (for one file) the file exist, with the standard library only,
    before anything is installed: the requests huggingface_hub makes first (``/api/models/REPO/revision/REV``; a HEAD
    of ``/REPO/resolve/REV/FILE``). Raises Refused for an answer that names what is missing; False when the Hub could
    not be asked (the download step then says why), True when all is there."""
    from urllib.parse import quote

    where = (endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    repo, revision = spec["repo"], spec["revision"]
    headers = {"User-Agent": "labwright-models-preflight"}
    if os.environ.get("HF_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['HF_TOKEN']}"
    asks = [("GET", f"{where}/api/models/{repo}/revision/{quote(revision, safe='')}")]
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
            code = exc.headers.get("X-Error-Code", "")
            if code in ("RepoNotFound", "RevisionNotFound", "EntryNotFound") or exc.code == 401:
                raise _not_found(code or "RepoNotFound", spec, where) from None
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
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    # huggingface_hub's 10 s defaults (constants.py 310-314) fail a HEAD or stall a read on a busy guest or a slow
    # link; a stalled read is retried with a Range request, so a longer wait costs nothing when all is well.
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "30")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "60")
    if not sys.stderr.isatty():  # its tqdm bars redraw with \r: in a pyinfra log or a pipe they are noise
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import filter_repo_objects, logging

    logging.set_verbosity_error()
    failures: tuple[type[BaseException], ...] = (HfHubHTTPError, LocalEntryNotFoundError, OSError,
                                                  *_transport_errors())
    repo, revision, name = spec["repo"], spec["revision"], spec["name"]
    where = endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    _check_name_free(models, name)
    remove_orphaned_partials(cache, repo)
    api = HfApi(endpoint=endpoint)
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
                                        endpoint=endpoint)
                snapshot = Path(local).parents[len(Path(spec["file"]).parts) - 1]
            else:
                snapshot = Path(snapshot_download(repo, revision=commit, cache_dir=str(cache), endpoint=endpoint,
                                                  allow_patterns=spec.get("allow") or None,
                                                  ignore_patterns=spec.get("ignore") or None, max_workers=4))
    except RevisionNotFoundError:
        raise _not_found("RevisionNotFound", spec, where) from None
    except RemoteEntryNotFoundError:
        raise _not_found("EntryNotFound", spec, where) from None
    except RepositoryNotFoundError:
        raise _not_found("RepoNotFound", spec, where) from None
    except failures as exc:
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
    sys.exit(main())
