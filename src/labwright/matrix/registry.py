"""`labwright matrix refresh` with no listing: read the package registries the matrix's families publish on.

Source: the PyPI JSON API (``{index}/NAME/json``), one request per package, conditional (If-None-Match /
If-Modified-Since from the last answer, and the body's sha256 when the server sends neither header), so a refresh
that finds nothing new rewrites nothing. What a wheel was built against comes from its name (wheelname.py) and, where
the name does not say (PyPI's torch wheels carry no ``+cuXYZ``), from its core metadata (PEP 658: the wheel URL +
``.metadata``; read once per release and remembered): the CUDA of its ``cuda-toolkit`` / ``nvidia-cuda-runtime``
Requires-Dist and its ``torch==`` pin.

Each package is written to ``<family>_pypi.toml`` (rows keep the day they were first seen); what was asked, answered
and when lives in ``registry-state.json`` beside them. A source that cannot be reached (or answers nonsense) is named
and its last file is kept as it was, with the day it was last refreshed. Then the sources outside PyPI
(download.pytorch.org's per-CUDA torch pages, GitHub releases of the prebuilt-wheel projects: outside.py), the same
way, each where it can be reached.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from email.parser import HeaderParser
from pathlib import Path
from queue import SimpleQueue
from typing import TypeVar
from urllib.parse import urljoin

from packaging.utils import canonicalize_name
from packaging.version import Version

from labwright import textio
from labwright.atomic import write_text_atomic
from labwright.errors import BadInput, OperationFailed
from labwright.matrix import outside
from labwright.matrix.load import wheels_from_rows
from labwright.matrix.model import Component, Wheel
from labwright.matrix.refresh import (
    Listed,
    _sort_key,
    check_out_dir,
    existing_rows,
    render_toml,
    wheel_from_listed,
    write_matrix_file,
)
from labwright.matrix.wheelinspect import linux_requirements
from labwright.matrix.wheelname import WheelNameError, parse_wheel_filename
from labwright.textio import ascii_digits, loads_json

DEFAULT_INDEX = "https://pypi.org/pypi"
STATE_FILE = "registry-state.json"
USER_AGENT = "labwright-matrix-refresh (+https://github.com/labwright)"
MAX_BODY = 32 * 1024 * 1024  # torch's JSON is ~1 MB; anything near this is not a registry answer


@dataclass(frozen=True)
class Feed:
    """One registry package and the matrix file it fills."""

    package: str
    stem: str  # output file: <stem>.toml
    floor: str  # releases older than this are left out (the matrix starts there)
    metadata: bool = False  # read each release's core metadata (CUDA, torch pin) from one of its wheels


FEEDS = (
    Feed("torch", "torch_pypi", "2.6", metadata=True),
    Feed("torchvision", "torchvision_pypi", "0.21", metadata=True),
    Feed("torchaudio", "torchaudio_pypi", "2.6", metadata=True),
    Feed("triton", "triton_pypi", "3.2"),
    Feed("exllamav3", "exllamav3_pypi", "0.0.20"),
    Feed("flash-attn", "flash_attn_pypi", "2.6"),
    Feed("causal-conv1d", "causal_conv1d_pypi", "1.4"),
    Feed("flash-linear-attention", "fla_pypi", "0.1"),
    Feed("fla-core", "fla_pypi", "0.1"),
    # vLLM's wheels are cp38-abi3 with no torch in the name: each release's METADATA pins torch==X (read here)
    Feed("vllm", "vllm_pypi", "0.20", metadata=True),
)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def age(stamp: str, now: datetime | None = None) -> str:
    """``2026-11-24T07:00:00Z`` -> ``3h ago`` / ``2 days ago``; unparsable -> the stamp itself."""
    try:
        then = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return stamp
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}min ago"
    if seconds < 172800:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400} days ago"


# -- HTTP ---------------------------------------------------------------------------------------------------------
@dataclass
class Answer:
    status: int  # 200 or 304
    body: bytes = b""
    etag: str = ""
    last_modified: str = ""
    content_type: str = ""
    link: str = ""  # the Link header (GitHub's pagination)


T = TypeVar("T")
R = TypeVar("R")


def side_by_side(work: Callable[[T], R], items: Sequence[T], workers: int = 4) -> list[R]:
    """``[work(item) for item in items]``, up to ``workers`` at a time; the first exception (in ``items`` order) is
    raised once every started item is done, as ``ThreadPoolExecutor.map`` does.

    Ctrl-C returns at once: the workers are daemon threads and this thread waits on a queue, which a signal
    interrupts; on KeyboardInterrupt no further item is started and the exception goes on up, without waiting for
    the requests in flight (a ``ThreadPoolExecutor`` would wait for each one's full timeout, in its ``with`` block
    and again at exit). Those end with the process; nothing was written from them (the callers write after this).
    """
    results: list[R | None] = [None] * len(items)
    errors: dict[int, BaseException] = {}
    ahead = iter(range(len(items)))
    lock, stop, finished = threading.Lock(), threading.Event(), SimpleQueue[None]()

    def worker() -> None:
        try:
            while not stop.is_set():
                with lock:
                    index = next(ahead, None)
                if index is None:
                    return
                try:
                    results[index] = work(items[index])
                except BaseException as exc:  # handed to the caller's thread below
                    errors[index] = exc
        finally:
            finished.put(None)

    count = min(workers, len(items))
    for number in range(count):
        threading.Thread(target=worker, name=f"labwright-fetch-{number}", daemon=True).start()
    try:
        for _ in range(count):
            finished.get()
    except BaseException:
        stop.set()
        raise
    if errors:
        raise errors[min(errors)]
    return results  # type: ignore[return-value] # every item ran: no None is left


class Unreachable(Exception):
    """The source did not answer usefully; the message says how, in a few words."""


def fetch(url: str, timeout: float, etag: str = "", last_modified: str = "", accept: str = "application/json",
          deadline: float | None = None, extra_headers: dict[str, str] | None = None) -> Answer:
    """GET ``url`` with a bounded connect/read timeout and an overall deadline; 304 when the validators match."""
    headers = {"User-Agent": USER_AGENT, "Accept": accept, **(extra_headers or {})}
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    request = urllib.request.Request(url, headers=headers)
    budget = deadline if deadline is not None else timeout * 4
    end = time.monotonic() + budget
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            chunks, size = [], 0
            while True:
                if time.monotonic() > end:
                    raise Unreachable(f"answer not complete after {budget:g}s (a trickling server?)")
                chunk = response.read(256 * 1024)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_BODY:
                    raise Unreachable(f"answer larger than {MAX_BODY // (1024 * 1024)} MiB")
                chunks.append(chunk)
            return Answer(200, b"".join(chunks), response.headers.get("ETag", ""),
                          response.headers.get("Last-Modified", ""), response.headers.get("Content-Type", ""),
                          response.headers.get("Link", ""))
    except urllib.error.HTTPError as exc:
        if exc.code == 304:
            return Answer(304, b"", exc.headers.get("ETag", "") or etag,
                          exc.headers.get("Last-Modified", "") or last_modified)
        if exc.code in (403, 429) and exc.headers.get("X-RateLimit-Remaining") == "0":
            raise Unreachable(f"HTTP {exc.code}: GitHub's API rate limit reached (60 requests an hour without a "
                              "token): set GITHUB_TOKEN in the environment or refresh later") from None
        raise Unreachable(f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise Unreachable(f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason) from None
    except TimeoutError:
        raise Unreachable(f"timed out after {timeout:g}s") from None
    except OSError as exc:
        raise Unreachable(f"{type(exc).__name__}: {exc}") from None


def fetch_range(url: str, first: int | None, last: int | None, timeout: float) -> tuple[bytes, int]:
    """Bytes ``first``..``last`` of ``url`` (``first`` None: the last ``last`` bytes) by an HTTP range request, and
    the file's whole size from Content-Range. A server that ignores the range (200: the whole file) is refused at
    once rather than read: a torch wheel is hundreds of MB."""
    wanted = f"bytes=-{last}" if first is None else f"bytes={first}-{last}"
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, "Range": wanted})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            if response.status != 206:
                raise Unreachable(f"HTTP {response.status} to a range request: the server sends whole files only")
            total = response.headers.get("Content-Range", "").rpartition("/")[2]
            body = response.read(MAX_BODY + 1)
            if len(body) > MAX_BODY:
                raise Unreachable(f"range answer larger than {MAX_BODY // (1024 * 1024)} MiB")
            return body, int(total) if ascii_digits(total) else 0
    except urllib.error.HTTPError as exc:
        raise Unreachable(f"HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise Unreachable(f"{type(exc).__name__}: {exc}") from None


_EOCD = struct.Struct("<4s4H2LH")  # end of central directory: signature, disks, entries, cd size, cd offset, comment
_CENTRAL = struct.Struct("<4s6H3L5H2L")  # a central directory entry, before its name
_LOCAL = struct.Struct("<4s5H3L2H")  # a member's local header, before its name and extra field
_METADATA_NAME = re.compile(r"^[^/]+\.dist-info/METADATA$")


def metadata_from_wheel(url: str, timeout: float) -> str:
    """A wheel's ``*.dist-info/METADATA`` read from the wheel itself with HTTP range requests, where the registry
    serves no PEP 658 metadata for it (PyPI had none for torch 2.14.1's wheels): the zip's end record from the last
    64 KiB, its central directory, then that one member (pip's lazy wheel reads the same parts). Unreachable when the
    server takes no ranges, the file is not a zip this reads (zip64: no torch wheel is near 4 GiB), or the member is
    missing."""
    tail, total = fetch_range(url, None, 65536, timeout)
    end = tail.rfind(b"PK\x05\x06")
    if end < 0 or len(tail) - end < _EOCD.size:
        raise Unreachable("no zip end record in the wheel's last 64 KiB")
    _, _, _, _, entries, cd_size, cd_offset, _ = _EOCD.unpack_from(tail, end)
    if 0xFFFFFFFF in (cd_size, cd_offset) or entries == 0xFFFF:
        raise Unreachable("a zip64 wheel (not read by range)")
    start_of_tail = total - len(tail)
    if total and cd_offset >= start_of_tail:
        directory = tail[cd_offset - start_of_tail:cd_offset - start_of_tail + cd_size]
    else:
        directory, _ = fetch_range(url, cd_offset, cd_offset + cd_size - 1, timeout)
    at = 0
    while at + _CENTRAL.size <= len(directory):
        fields = _CENTRAL.unpack_from(directory, at)
        if fields[0] != b"PK\x01\x02":
            break
        method, size, name_len, extra_len, comment_len, offset = (fields[4], fields[8], fields[10], fields[11],
                                                                  fields[12], fields[16])
        name = directory[at + _CENTRAL.size:at + _CENTRAL.size + name_len].decode("utf-8", "replace")
        at += _CENTRAL.size + name_len + extra_len + comment_len
        if not _METADATA_NAME.match(name):
            continue
        header, _ = fetch_range(url, offset, offset + _LOCAL.size + name_len + 1024 + size - 1, timeout)
        local = _LOCAL.unpack_from(header, 0)
        data = header[_LOCAL.size + local[9] + local[10]:][:size]
        if local[0] != b"PK\x03\x04" or len(data) != size:
            raise Unreachable(f"{name}: its local header or data is not where the zip directory says")
        try:
            if method == 8:
                return zlib.decompressobj(-15).decompress(data).decode("utf-8", "replace")
        except zlib.error as exc:
            raise Unreachable(f"{name}: {exc}") from None
        if method == 0:
            return data.decode("utf-8", "replace")
        raise Unreachable(f"{name} is compressed with zip method {method}")
    raise Unreachable("no *.dist-info/METADATA in the wheel's zip directory")


#: PyPI serves its files from files.pythonhosted.org (the JSON API's "url" there); a mirror in front of it may answer
#: with its own path to the same file: the machine this was built on gets https://pypi.org/packages/packages/<path>
#: for https://files.pythonhosted.org/packages/<path> (the simple API gives the latter; both serve the same bytes).
#: The matrix keeps the canonical URL, so the data it ships installs from any machine.
MIRRORED_FILES = (("https://pypi.org/packages/packages/", "https://files.pythonhosted.org/packages/"),)


def canonical_file_url(url: str) -> str:
    for mirrored, canonical in MIRRORED_FILES:
        if url.startswith(mirrored):
            return canonical + url[len(mirrored):]
    return url


# -- state ----------------------------------------------------------------------------------------------------------
def read_state(out_dir: Path) -> dict:
    path = out_dir / STATE_FILE
    if not path.exists():
        return {"sources": {}, "built_against": {}}
    fix = f"remove it (the next refresh fetches everything again) or restore it from {STATE_FILE}.prev"
    try:
        data = loads_json(textio.read_text(path, "the registry state of `matrix refresh`"))
    except (json.JSONDecodeError, RecursionError):
        raise BadInput(f"{path}: not the JSON `matrix refresh` writes: {fix}") from None
    from labwright.schema.files import RegistryState, check  # pydantic: only where the file is read

    check(RegistryState, data, path, "the registry state of `matrix refresh`", fix)
    data.setdefault("built_against", {})
    return data


def write_state(out_dir: Path, state: dict) -> None:
    path = out_dir / STATE_FILE
    text = json.dumps(state, indent=1, sort_keys=True) + "\n"
    try:
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            return
        write_text_atomic(path, text, keep_previous=True)
    except OSError as exc:
        raise OperationFailed(f"{path}: cannot write it ({exc.strerror or type(exc).__name__})") from None


# -- parsing --------------------------------------------------------------------------------------------------------
_CUDA_PACKAGES = re.compile(r"(?a)^(cuda-toolkit|nvidia-cuda-runtime(-cu\d+)?)$")


def built_against(metadata: str) -> dict[str, str]:
    """From a wheel's METADATA: ``version``, ``cuda`` (its CUDA runtime requirement's major.minor, Linux) and
    ``torch`` (an exact ``torch==`` pin), where present."""
    headers = HeaderParser().parsestr(metadata)
    out = {"version": (headers.get("Version") or "").strip()}
    for req in linux_requirements(headers):
        name = canonicalize_name(req.name)
        pins = [s.version for s in req.specifier if s.operator == "=="]
        if _CUDA_PACKAGES.match(name) and pins and "cuda" not in out:
            out["cuda"] = ".".join(pins[0].split(".")[:2])
        elif name == "torch" and pins:
            out["torch"] = pins[0]
    return out


def _linux(platform: str) -> bool:
    return platform == "any" or ("linux" in platform and ("x86_64" in platform or "aarch64" in platform))


@dataclass
class Outcome:
    """What one source gave: the rows for its file, and one line per thing left out."""

    package: str
    status: str  # "updated", "unchanged", "unreachable"
    wheels: list[Wheel] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    newest: str = ""
    sdists_only: bool = False
    url: str = ""  # sources outside PyPI: the URL asked


def parse_project(data: object, feed: Feed, components: dict[str, Component], pre: bool,
                  json_url: str) -> tuple[list[tuple[Listed, str]], list[str], str, int]:
    """(listed wheels with their release, lines, newest kept release, sdist count) from a PyPI JSON answer."""
    if not isinstance(data, dict) or not isinstance(data.get("releases"), dict):
        raise Unreachable("answer is JSON but has no `releases` object (not the PyPI JSON API?)")
    floor = Version(feed.floor)
    listed: list[tuple[Listed, str]] = []
    lines: list[str] = []
    pres, yanked, sdists = [], [], 0
    newest: Version | None = None
    for release, files in data["releases"].items():
        try:
            version = Version(release)
        except ValueError:  # InvalidVersion, and int()'s refusal of a release of over 4,300 digits
            lines.append(f"{feed.package} release {release!r}: not a PEP 440 version: skipped")
            continue
        if version < floor or not isinstance(files, list) or not files:
            continue
        if (version.is_prerelease or version.is_devrelease) and not pre:
            pres.append(release)
            continue
        live = [f for f in files if isinstance(f, dict) and not f.get("yanked")]
        if len(live) < len(files):
            reason = next((f.get("yanked_reason") for f in files if isinstance(f, dict) and f.get("yanked")), "")
            yanked.append(f"{release}" + (f" ({reason})" if reason else ""))
        for item in live:
            if item.get("packagetype") != "bdist_wheel":
                sdists += 1
                newest = max(newest, version) if newest else version
                continue
            filename = str(item.get("filename", ""))
            try:
                name = parse_wheel_filename(filename)
            except WheelNameError as exc:
                lines.append(f"{feed.package} {release}: {exc}")
                continue
            try:
                named = Version(name.public_version)
            except ValueError:
                named = None
            if named != version:
                lines.append(f"{feed.package} {release}: {filename} is listed under release {release} but its name "
                             f"says {name.version}: skipped")
                continue
            if canonicalize_name(name.name) != canonicalize_name(feed.package):
                lines.append(f"{feed.package} {release}: {filename} names another project: skipped")
                continue
            if not _linux(name.platform_tag):
                continue
            url = canonical_file_url(urljoin(json_url, str(item.get("url", ""))))
            digests = item.get("digests") or {}
            if not isinstance(digests, dict):
                raise Unreachable(f"{feed.package} {release}: `digests` of {filename[:80]!r} is "
                                  f"{type(digests).__name__}, not the object PyPI's JSON API gives")
            digest = str(digests.get("sha256", "")).lower()
            listed.append((Listed(url=url, sha256=digest, source="pypi.org"), release))
            newest = max(newest, version) if newest else version
    if pres:
        lines.append(f"{feed.package}: {len(pres)} pre-release(s) left out ({', '.join(sorted(pres, key=Version)[-3:])}"
                     f"{' ...' if len(pres) > 3 else ''}): pass --pre to include them")
    if yanked:
        lines.append(f"{feed.package}: yanked on PyPI, left out: {', '.join(sorted(yanked)[:4])}"
                     f"{f' (+{len(yanked) - 4} more)' if len(yanked) > 4 else ''}")
    return listed, lines, str(newest or ""), sdists


def _metadata_for(release: str, listed: list[Listed], feed: Feed, state: dict, timeout: float,
                  failed: list[str], lines: list[str]) -> dict[str, str]:
    """What this release's wheels were built against, from a linux x86_64 wheel's core metadata (remembered; up to
    three wheels are tried, cp312 first, as a mirror may hold the metadata of some files only)."""
    key = f"{feed.package}=={release}"
    known = state["built_against"].get(key)
    today = _now()[:10]
    if isinstance(known, dict) and known.get("unreadable") == today:
        failed.append(f"{release} ({known.get('why', 'unreadable')}, today)")
        return {}
    if isinstance(known, dict) and "unreadable" not in known:
        return known
    picks = sorted((item for item in listed if "x86_64" in parse_wheel_filename(item.url).platform_tag),
                   key=lambda item: "cp312" not in item.url)[:3]
    why = ""
    for pick in picks:
        source = pick.url + ".metadata"
        try:
            text = fetch(source, timeout, accept="*/*").body.decode("utf-8", "replace")
        except Unreachable as exc:
            try:  # no PEP 658 file for it: read METADATA from the wheel itself
                text, source = metadata_from_wheel(pick.url, timeout), pick.url + " (METADATA by range)"
            except Unreachable as by_range:
                why = why or f"{exc}; the wheel by range: {by_range}"  # the first (cp312) wheel's reasons
                continue
        found = built_against(text)
        name = parse_wheel_filename(pick.url)
        if found.get("version") and Version(found["version"]) != Version(name.version):
            lines.append(f"{feed.package} {release}: {name.filename}'s metadata says version {found['version']}, its "
                         f"name {name.version}: the wheel contradicts its name, left out")
            return {"contradicts": found["version"]}
        found["from"] = source
        state["built_against"][key] = found
        return found
    if picks:
        failed.append(f"{release} ({why})")
        state["built_against"][key] = {"unreadable": today, "why": why}
    return {}


def _rows(feed: Feed, listed: list[tuple[Listed, str]], components: dict[str, Component], state: dict,
          timeout: float, lines: list[str], first_seen: dict[str, str], today: str,
          info: dict | None = None) -> tuple[list[Wheel], bool]:
    by_release: dict[str, list[Listed]] = {}
    for item, release in listed:
        by_release.setdefault(release, []).append(item)
    rows: list[Wheel] = []
    failed: list[str] = []
    for release, items in sorted(by_release.items(), key=lambda kv: Version(kv[0])):
        before = len(failed)
        meta = _metadata_for(release, items, feed, state, timeout, failed, lines) if feed.metadata else {}
        if feed.metadata and not meta and info and str(info.get("version")) == release:
            # the newest release's Requires-Dist is in the project JSON itself
            meta = built_against("".join(f"Requires-Dist: {r}\n" for r in info.get("requires_dist") or []))
            if meta.get("cuda") or meta.get("torch"):
                del failed[before:]
                meta["from"] = "info.requires_dist"
                state["built_against"][f"{feed.package}=={release}"] = meta
        if "contradicts" in meta:
            continue
        if feed.package == "torch" and not meta.get("cuda"):
            if meta:
                lines.append(f"torch {release}: its metadata requires no CUDA runtime (a CPU build?): left out")
            continue
        for item in items:
            row = wheel_from_listed(item, components)
            if isinstance(row, str):
                lines.append(f"{feed.package} {release}: {row}")
                continue
            changes: dict[str, str] = {"seen": first_seen.get(row.url, today)}
            if meta.get("cuda") and not row.cuda:
                changes["cuda"] = meta["cuda"]
            if meta.get("torch") and feed.package != "torch":
                torch_pin = meta["torch"]
                changes |= {"requires_torch": f"=={torch_pin}", "torch_build": torch_pin,
                            "torch": ".".join(torch_pin.split("+")[0].split(".")[:2])}
            if row.package == "exllamav3" and row.platform == "any":
                changes["note"] = "JIT wheel: compiles its extension on first import (needs nvcc), no prebuilt .so"
            rows.append(replace(row, **changes))
    if failed:
        left = " left out this time" if feed.package == "torch" else " kept without a torch pin"
        lines.append(f"{feed.package}: core metadata (PEP 658) not readable for {len(failed)} release(s): "
                     f"{', '.join(failed[:4])}{' ...' if len(failed) > 4 else ''}: what they were built against is "
                     f"unknown, their wheels{left}; the next refresh asks again")
    return sorted(rows, key=_sort_key), bool(failed) and feed.package == "torch"


# -- refresh --------------------------------------------------------------------------------------------------------
@dataclass
class RegistryReport:
    outcomes: list[Outcome]
    written: list[Path]
    unreached: dict[str, str]  # outside sources not reached this time: name -> why
    outside: list[Outcome] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes + self.outside if o.status == "unreachable"]

    @property
    def all(self) -> list[Outcome]:
        return self.outcomes + self.outside


def _check_index(index: str) -> str:
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", index):
        raise BadInput(f"--index {index!r}: not an http(s) URL; give the PyPI JSON API root like {DEFAULT_INDEX}")
    return index.rstrip("/")


def refresh_registry(out_dir: Path, components: dict[str, Component], index: str = DEFAULT_INDEX,
                     packages: list[str] | None = None, pre: bool = False, timeout: float = 15.0,
                     dry_run: bool = False, pytorch_index: str = outside.PYTORCH_INDEX,
                     github_api: str = outside.GITHUB_API, outside_sources: bool = True) -> RegistryReport:
    """Fetch each feed (conditionally), write the files whose data changed, and say what each source gave; then
    the sources outside PyPI (outside.py) the same way, unless ``outside_sources`` is False."""
    index = _check_index(index)
    pytorch_index = outside.check_root("--pytorch-index", pytorch_index, outside.PYTORCH_INDEX)
    github_api = outside.check_root("--github-api", github_api, outside.GITHUB_API)
    if not math.isfinite(timeout) or not 0 < timeout <= 600:
        raise BadInput(f"--timeout {timeout:g}: give a number of seconds above 0, at most 600 (default 15)")
    feeds = list(FEEDS)
    if packages:
        names = {canonicalize_name(p) for p in packages}
        unknown = names - {f.package for f in FEEDS}
        if unknown:
            raise BadInput(f"--package {', '.join(sorted(unknown))}: not a registry feed; use one of "
                           f"{', '.join(f.package for f in FEEDS)}")
        stems = {f.stem for f in FEEDS if f.package in names}
        feeds = [f for f in FEEDS if f.stem in stems]  # a file is written whole: all of its packages
    check_out_dir(out_dir, feeds[0].stem)
    state = read_state(out_dir)
    today = _now()[:10]
    outcomes: list[Outcome] = []
    by_stem: dict[str, list[Outcome]] = {}
    for name in {f"{index}/{feed.package}/json" for feed in feeds}:
        state["sources"].setdefault(name, {})  # each worker below then touches only its own record
    before = {name: dict(record) for name, record in state["sources"].items()}
    # feeds are independent: fetch them side by side (each request still has its own bounded timeout; Ctrl-C
    # returns at once, before anything is written)
    results = side_by_side(lambda feed: _refresh_one(feed, out_dir, components, index, pre, timeout, state, today),
                           feeds)
    for feed, outcome in zip(feeds, results, strict=True):
        outcomes.append(outcome)
        by_stem.setdefault(feed.stem, []).append(outcome)
    written: list[Path] = []
    for stem, parts in by_stem.items():
        if any(o.status == "unreachable" for o in parts):
            # keep the file as it was: never half of a family from this run and half from the last; and forget
            # that the parts which did answer were seen, so the next refresh parses them again
            for o in parts:
                url = f"{index}/{o.package}/json"
                if o.status == "updated":
                    old = before.get(url, {})
                    state["sources"][url].update({k: old.get(k, "") for k in ("etag", "last_modified", "sha256",
                                                                             "changed", "newest")})
            continue
        if all(o.status == "unchanged" for o in parts):
            continue
        written += write_family(out_dir / f"{stem}.toml", [w for o in parts for w in o.wheels], "pypi-json",
                                [f"{index}/{o.package}/json" for o in parts],
                                state["sources"][f"{index}/{parts[0].package}/json"]["changed"], dry_run)
    extra: list[Outcome] = []
    if outside_sources:
        wanted = {str(canonicalize_name(p)) for p in packages} if packages else None
        extra, more = outside.refresh_outside(out_dir, components, state, pytorch_index=pytorch_index,
                                              github_api=github_api, packages=wanted, pre=pre, timeout=timeout,
                                              today=today, dry_run=dry_run)
        written += more
    if not dry_run:
        write_state(out_dir, state)
    unreached = {o.package: o.lines[0] for o in extra if o.status == "unreachable"}
    return RegistryReport(outcomes, written, unreached, extra)


def write_family(path: Path, wheels: list[Wheel], kind: str, sources: list[str], refreshed: str,
                 dry_run: bool) -> list[Path]:
    """Write one refreshed matrix file (one row per URL, sorted), or remove it when its sources list no wheel
    any more; the paths written."""
    rows = sorted({w.url: w for w in reversed(wheels)}.values(), key=_sort_key)  # the first row per URL wins
    if dry_run:
        return []
    if not rows:
        if path.exists():
            path.unlink()
        return []
    header: dict[str, str | int] = {"kind": kind, "source": ", ".join(sources), "refreshed": refreshed,
                                    "count": len(rows)}
    write_matrix_file(path, render_toml(rows, header).replace("edit the listing under sources/ and re-run",
                                                              "re-run `labwright matrix refresh`"))
    return [path]


def _refresh_one(feed: Feed, out_dir: Path, components: dict[str, Component], index: str, pre: bool,
                 timeout: float, state: dict, today: str) -> Outcome:
    url = f"{index}/{feed.package}/json"
    record = state["sources"].setdefault(url, {})
    path = out_dir / f"{feed.stem}.toml"
    now = _now()
    record["checked"] = now
    # an answer "as before" is only usable when what we made of it is still here and still what we would make:
    # the file exists (or the project had no wheels), --pre is as then, no torch release waits for its metadata
    reusable = ((path.exists() or (record.get("wheels") == 0 and bool(record.get("sha256"))))
                and record.get("pre", False) == pre and record.get("incomplete", "") in ("", today))
    try:
        answer = fetch(url, timeout, record.get("etag", "") if reusable else "",
                       record.get("last_modified", "") if reusable else "")
        digest = hashlib.sha256(answer.body).hexdigest() if answer.status == 200 else record.get("sha256", "")
        # the body's hash covers servers that send no validators
        if reusable and (answer.status == 304 or digest == record.get("sha256")):
            record.update(ok=now, error="")
            kept = [w for w in wheels_from_rows(existing_rows(path) or [], str(path)) if w.package == feed.package]
            return Outcome(feed.package, "unchanged", wheels=kept, newest=record.get("newest", ""),
                           sdists_only=not kept and bool(record.get("sdists")))
        if answer.status == 304:
            raise Unreachable("HTTP 304 to a request without validators")
        try:
            data = loads_json(answer.body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise Unreachable(f"malformed JSON ({exc.msg if isinstance(exc, json.JSONDecodeError) else exc})") from None
        listed, lines, newest, sdists = parse_project(data, feed, components, pre, url)
    except Unreachable as exc:
        record.update(error=str(exc), error_at=now)
        return Outcome(feed.package, "unreachable", lines=[str(exc)])
    first_seen = {canonical_file_url(str(r.get("url"))): str(r.get("seen")) for r in (existing_rows(path) or [])
                  if r.get("seen")}
    info = data.get("info") if isinstance(data.get("info"), dict) else None
    wheels, incomplete = _rows(feed, listed, components, state, timeout, lines, first_seen, today, info)
    wheels = [w for w in wheels if w.package == feed.package]
    # torch releases whose CUDA is unknown are asked about again by the first refresh of another day
    record.update(etag=answer.etag, last_modified=answer.last_modified, sha256=digest, pre=pre, ok=now,
                  incomplete=today if incomplete else "",
                  changed=now, error="", newest=newest, wheels=len(wheels), sdists=sdists)
    outcome = Outcome(feed.package, "updated", wheels=wheels, lines=lines, newest=newest,
                      sdists_only=bool(sdists) and not wheels)
    return outcome


# -- how old the data is (matrix show) ----------------------------------------------------------------------------
def _records(root: Path) -> dict[str, dict]:
    try:
        return {url: rec for url, rec in read_state(root)["sources"].items() if isinstance(rec, dict)}
    except BadInput:
        return {}


def data_ages(root: Path, now: datetime | None = None) -> dict[str, str]:
    """package -> ``pypi.org: changed 2 days ago, checked 3h ago`` for every package a refresh has fetched."""
    out = {}
    for url, rec in _records(root).items():
        package = url.rstrip("/").rsplit("/", 2)[-2] if url.endswith("/json") else str(rec.get("name") or url)
        if rec.get("changed"):
            host = url.split("/")[2] if "://" in url else url
            what = "sdists only" if not rec.get("wheels") and rec.get("sdists") else f"{rec.get('wheels', 0)} wheels"
            out[package] = (f"{package}@{host}: {what}, newest {rec.get('newest') or '-'}, changed "
                            f"{age(rec['changed'], now)}, checked {age(rec.get('ok') or rec['changed'], now)}")
    return out


def stale_lines(root: Path, now: datetime | None = None) -> list[str]:
    """One line per source whose last refresh failed: since when, and how old the data kept from it is."""
    lines = []
    for url, rec in _records(root).items():
        if rec.get("error"):
            kept = f"data kept from {rec['changed']} ({age(rec['changed'], now)})" if rec.get("changed") else (
                "no data from it yet")
            lines.append(f"{url}: last refresh {age(rec.get('error_at', ''), now)} failed ({rec['error']}); {kept}")
    return lines
