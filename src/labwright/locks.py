"""Hashed locks for the service venvs (LiteLLM, Open WebUI and its pipelines, Kokoro): every file pinned by the
sha256 its index publishes, never by a hash taken from the file when it arrives.

A lock is a pip requirements file, one ``name[extras]==version --hash=sha256:HEX ...`` line per distribution of the
whole resolution, installed with ``pip install --require-hashes -r LOCK`` (pip refuses any file whose sha256 is not
listed, and any requirement without one). It is made on the controller:

1. pip resolves the requirements for the guest's CPython and platforms without installing anything
   (``pip install --dry-run --report``; PyPI serves core metadata per PEP 658, so no wheel is downloaded);
2. for each distribution, the index's project page (PEP 691 JSON, else PEP 503 HTML with ``#sha256=`` fragments) gives
   the sha256 of every wheel of that version; the file pip chose must be one of them. A file the index publishes no
   sha256 for is refused (pip's report would hash it on arrival, which proves nothing about where it came from).

The wheelhouse commands (labwright.wheelhouse) write ``requirements.lock`` beside the wheels and download them
against it, so a wheelhouse carries its lock to the guest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from labwright.errors import BadInput, OperationFailed, SafetyCheckFailed
from labwright.textio import loads_json, read_sealed, seal

PYPI_SIMPLE = "https://pypi.org/simple/"
LOCK_NAME = "requirements.lock"
SIMPLE_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
TIMEOUT_S = 30.0
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Locked:
    """One distribution of a lock: the requirement as pip must be asked for it, and the sha256s the index
    publishes for the wheels of that version."""

    name: str  # canonical
    version: str
    extras: tuple[str, ...]
    hashes: tuple[str, ...]

    def line(self) -> str:
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        return f"{self.name}{extras}=={self.version} " + " ".join(f"--hash=sha256:{h}" for h in self.hashes)


def check_index(index_url: str) -> str:
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", index_url):
        raise BadInput(f"--index-url {index_url!r}: not an http(s) URL; give a simple index such as {PYPI_SIMPLE}")
    return index_url if index_url.endswith("/") else index_url + "/"


def resolve(requirements: list[str], python: str, platforms: list[str], index_url: str,
            extra_index_urls: tuple[str, ...] = ()) -> list[dict]:
    """pip's installation report for ``requirements`` on CPython ``python`` and ``platforms``, nothing installed."""
    with tempfile.TemporaryDirectory(prefix="labwright-lock-") as tmp:
        report = Path(tmp) / "report.json"
        # Not --isolated: PIP_FIND_LINKS (the Open WebUI wheelhouse's CPU torch page) counts, as for the download;
        # no pip.conf (PIP_CONFIG_FILE below).
        command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "--dry-run",
                   "--ignore-installed", "--quiet", "--report", str(report), "--only-binary=:all:",
                   "--python-version", python, "--implementation", "cp", "--target", str(Path(tmp) / "target"),
                   "--index-url", index_url]
        for extra in extra_index_urls:
            command += ["--extra-index-url", extra]
        for platform in platforms:
            command += ["--platform", platform]
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
        proc = subprocess.run([*command, *requirements], capture_output=True, text=True, env=env, timeout=1800)
        if proc.returncode != 0:
            lines = [line.strip() for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
            mismatch = hash_mismatch(lines, index_url)
            if mismatch:
                raise SafetyCheckFailed(mismatch)
            errors = [line for line in lines if line.startswith("ERROR:")]
            raise OperationFailed(f"cannot resolve {' '.join(requirements)} for CPython {python} from {index_url}: "
                                  f"{(errors or lines or ['pip said nothing'])[-1]}")
        return list(loads_json(report.read_text()).get("install", []))


def hash_mismatch(lines: list[str], index_url: str, lock: Path | None = None) -> str:
    """One line for pip's "THESE PACKAGES DO NOT MATCH THE HASHES" in ``lines`` (naming the file and both sha256s);
    "" when pip said no such thing."""
    if not any("DO NOT MATCH THE HASHES" in line for line in lines):
        return ""
    at = next((i for i, line in enumerate(lines) if " from http" in line or " from file" in line), None)
    file = lines[at].split(" from ", 1)[0].strip() if at is not None else "a file"
    expected = next((line.split()[-1] for line in lines if line.startswith("Expected sha256")), "?")
    got = next((line.split()[-1] for line in lines if line.startswith("Got")), "?")
    made = f"the lock {lock} was made" if lock else "it was listed"
    return (f"{file}: its sha256 is {got}, not the {expected} {index_url} published when {made}: tampered with or "
            "replaced on the index or on the way; nothing was kept or installed")


def published_hashes(index_url: str, name: str, version: str, timeout: float = TIMEOUT_S,
                     missing_ok: bool = False) -> dict[str, str]:
    """{wheel file name: sha256} for every wheel of ``name`` ``version`` whose sha256 the index publishes
    (``missing_ok``: an index without the project, HTTP 404, gives none)."""
    from labwright.matrix.outside import parse_simple  # the PEP 503/691 reader `matrix refresh` uses

    url = f"{index_url}{canonicalize_name(name)}/"
    request = urllib.request.Request(url, headers={"Accept": SIMPLE_ACCEPT, "User-Agent": "labwright-lock"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body, content_type = response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        if exc.code == 404 and missing_ok:
            return {}
        raise OperationFailed(f"cannot read {url} (HTTP {exc.code}): the lock needs the sha256 the index publishes; "
                              "check --index-url") from None
    except (urllib.error.URLError, OSError) as exc:
        raise OperationFailed(f"cannot read {url} ({getattr(exc, 'reason', exc)}): the lock needs the sha256 the "
                              "index publishes; check the network or --index-url") from None
    try:
        listed, _ = parse_simple(body, content_type, url, "")
    except ValueError as exc:
        raise OperationFailed(f"{url}: {exc}") from None
    return _published(listed, version)


def _published(listed: list, version: str, name: str | None = None) -> dict[str, str]:
    """{wheel file name: sha256} of the listed files of ``version`` (and project ``name``, when given) that carry a
    sha256; ``+`` may be written %2B in a link (PyTorch's pages do)."""
    out: dict[str, str] = {}
    for item in listed:
        filename = item.url.rsplit("/", 1)[-1].split("#", 1)[0].replace("%2B", "+")
        try:
            file_name, file_version, _, _ = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        if (name is None or file_name == canonicalize_name(name)) and file_version == Version(version) \
                and item.sha256:
            out[filename] = item.sha256
    return out


def find_links_hashes(name: str, version: str, timeout: float = TIMEOUT_S) -> dict[str, str]:
    """{wheel file name: sha256} of ``name`` ``version`` on the http(s) pages of PIP_FIND_LINKS that give one
    (``#sha256=`` fragments: PyTorch's https://download.pytorch.org/whl/cpu/torch/ does); a local directory gives
    none (nobody published its files' hashes), so a file found only there cannot be locked."""
    from labwright.matrix.outside import parse_simple

    out: dict[str, str] = {}
    for page in os.environ.get("PIP_FIND_LINKS", "").split():
        if not page.startswith(("http://", "https://")):
            continue
        request = urllib.request.Request(page, headers={"Accept": "text/html", "User-Agent": "labwright-lock"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                listed, _ = parse_simple(response.read(), response.headers.get("Content-Type", "text/html"), page, "")
        except (urllib.error.URLError, OSError, ValueError):
            continue
        out.update(_published(listed, version, name))
    return out


def lock_entries(requirements: list[str], python: str, platforms: list[str], index_url: str = PYPI_SIMPLE,
                 timeout: float = TIMEOUT_S, extra_index_urls: tuple[str, ...] = (),
                 exclude: tuple[str, ...] = ()) -> list[Locked]:
    """The lock of ``requirements`` for CPython ``python`` (see the module docstring); OperationFailed naming the
    file when no index publishes a sha256 for one pip chose (``extra_index_urls``: also asked, as pip does).
    ``exclude``: distributions resolved but left out of the lock (a stack's own wheels, given as ``name @ URL#sha256=``
    and installed first by path and hash): only what they require is locked, and the lock may then be empty."""
    index_url = check_index(index_url)
    indexes = (index_url, *(check_index(extra) for extra in extra_index_urls))
    extras: dict[str, set[str]] = {}
    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement as exc:
            raise BadInput(f"{text!r} is not a requirement ({exc})") from None
        extras.setdefault(canonicalize_name(requirement.name), set()).update(requirement.extras)
    entries = []
    excluded = {canonicalize_name(name) for name in exclude}
    for item in resolve(requirements, python, platforms, index_url, indexes[1:]):
        name = canonicalize_name(str(item["metadata"]["name"]))
        version = str(item["metadata"]["version"])
        if name in excluded:
            continue
        chosen = str((item.get("download_info") or {}).get("url", "")).rsplit("/", 1)[-1].replace("%2B", "+")
        hashes: dict[str, str] = {}
        for index in indexes:
            if chosen not in hashes:
                hashes.update(published_hashes(index, name, version, timeout, missing_ok=True))
        if chosen not in hashes:
            hashes.update(find_links_hashes(name, version, timeout))
        if chosen not in hashes:
            raise OperationFailed(f"{chosen or name + ' ' + version}: {index_url} publishes no sha256 for it, so it "
                                  "cannot be pinned (a hash taken on arrival proves nothing): use an index or a "
                                  "find-links page that publishes hashes (PEP 503 #sha256= or PEP 691, such as "
                                  "https://download.pytorch.org/whl/cpu/torch/), not a local directory; nothing was "
                                  "installed")
        entries.append(Locked(name, version, tuple(sorted(extras.get(name, ()))), tuple(sorted(set(hashes.values())))))
    if not entries and not excluded:
        raise OperationFailed(f"pip resolved nothing for {' '.join(requirements)}")
    return sorted(entries, key=lambda e: e.name)


def render(entries: list[Locked], requirements: list[str], python: str, index_url: str) -> str:
    head = [f"# labwright lock: {' '.join(requirements)} for CPython {python}, sha256 as {index_url} publishes them",
            "# install: pip install --require-hashes -r THIS_FILE (docs/security.md, Every download pinned)"]
    return "\n".join([*head, *(entry.line() for entry in entries)]) + "\n"


def make_lock(requirements: list[str], python: str, platforms: list[str], index_url: str = PYPI_SIMPLE,
              extra_index_urls: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> str:
    index_url = check_index(index_url)
    entries = lock_entries(requirements, python, platforms, index_url, extra_index_urls=extra_index_urls,
                           exclude=exclude)
    return render(entries, requirements, python, " and ".join((index_url, *extra_index_urls)))


def cached_lock(requirements: list[str], python: str, platforms: list[str], index_url: str = PYPI_SIMPLE,
                extra_index_urls: tuple[str, ...] = (), root: Path | None = None,
                exclude: tuple[str, ...] = ()) -> Path:
    """The lock of ``requirements`` for CPython ``python`` from the index(es), made once and kept under the cache
    (``~/.cache/labwright/locks/``): a deploy that installs from the index, not a wheelhouse, puts it on the guest
    and installs from it alone, so every later deploy installs exactly the same files."""
    from labwright import paths
    from labwright.atomic import write_bytes_atomic

    parts: list[object] = [sorted(requirements), python, platforms, index_url, list(extra_index_urls)]
    if exclude:  # only then: the keys of the service locks already cached stay as they were
        parts.append(sorted(canonicalize_name(name) for name in exclude))
    key = json.dumps(parts)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    path = (root or paths.cache_root() / "locks") / f"{digest}.lock"
    if read_sealed(path) is None:  # absent, or not whole as it was written (emptied, cut short, replaced): made again
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir() and not path.is_symlink():
            raise BadInput(f"{path} is a directory where labwright keeps a lock: remove it and run again")
        lock = make_lock(requirements, python, platforms, index_url, extra_index_urls, exclude)
        write_bytes_atomic(path, seal(lock.encode()))
    return path


def check_lock(path: Path) -> list[str]:
    """The requirement lines of the lock at ``path``; BadInput (one line, the path and the fix) unless every line pins
    an exact version with at least one sha256."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the lock ({exc.strerror or exc}): rebuild the wheelhouse, which writes "
                       f"{LOCK_NAME} beside the wheels") from None
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    for number, line in enumerate(lines, 1):
        if "==" not in line.split(" ", 1)[0] or not _HASH.search(line):
            raise BadInput(f"{path}: requirement {number} ({line.split(' ', 1)[0]!r}) is not pinned with ==version and "
                           "--hash=sha256:...: rebuild the lock (labwright wheelhouse <service>)")
    if not lines:
        raise BadInput(f"{path}: an empty lock: rebuild it (labwright wheelhouse <service>)")
    return lines
