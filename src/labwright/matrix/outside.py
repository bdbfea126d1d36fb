"""`matrix refresh`: the wheel sources outside PyPI, read where they can be reached.

- PyTorch's own index, one simple page per CUDA (``https://download.pytorch.org/whl/cu128/torch/``): PEP 503
  (HTML anchors, ``#sha256=`` fragments, PEP 592 ``data-yanked``) or, when the server offers it, PEP 691 JSON
  (``application/vnd.pypi.simple.v1+json``: ``files[].filename/url/hashes.sha256/yanked``). The +cuXYZ builds
  PyPI does not carry live only here.
- GitHub releases of the projects that publish prebuilt wheels as release assets (exllamav3, flash-attention,
  causal-conv1d, mjun0812's flash-attention rebuilds): the REST API's "List releases"
  (``GET /repos/{owner}/{repo}/releases?per_page=100``, docs.github.com/rest/releases/releases, API version
  2022-11-28: ``tag_name``, ``draft``, ``prerelease``, ``assets[].name``, ``assets[].browser_download_url`` and,
  since 2025, ``assets[].digest`` = ``sha256:HEX``), following ``Link: <...>; rel="next"`` pages. A
  ``GITHUB_TOKEN`` in the environment is sent as a bearer token (60 unauthenticated requests an hour per address
  otherwise; a 403/429 with ``X-RateLimit-Remaining: 0`` is said as such).

Each source is asked conditionally (ETag / Last-Modified, or the body's sha256) like the PyPI feeds
(``registry.py``), and writes its own ``<stem>.toml`` beside the curated listings; the loader keeps one row per URL
(the curated row, with the sha256 a refresh learned). A source that cannot be reached (no DNS here, for one) is
named with the day of the data kept from it; its file is never half rewritten.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from labwright.errors import BadInput
from labwright.matrix.load import wheels_from_rows
from labwright.matrix.model import Component, Wheel
from labwright.matrix.refresh import (
    Listed,
    _Anchors,
    _split_fragment,
    existing_rows,
    wheel_from_listed,
)
from labwright.matrix.wheelname import WheelNameError, parse_wheel_filename
from labwright.textio import loads_json

PYTORCH_INDEX = "https://download.pytorch.org"
GITHUB_API = "https://api.github.com"
SIMPLE_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
GITHUB_ACCEPT = "application/vnd.github+json"
MAX_PAGES = 10  # 1,000 releases: more than any of these projects has


@dataclass(frozen=True)
class OutsideFeed:
    """One source outside PyPI and the matrix file it fills (several feeds may share a file)."""

    name: str  # as said to the operator: "download.pytorch.org cu128", "turboderp-org/exllamav3 releases"
    kind: str  # "simple" (PEP 503/691 page) or "github" (REST API releases)
    path: str  # below the source root: "whl/cu128/torch/", "repos/turboderp-org/exllamav3/releases"
    stem: str
    source: str  # the publisher recorded on each row
    package: str  # the project its wheels must be
    floor: str  # releases older than this are left out


# PyTorch's CUDA indexes from 2.6 on (cu124 ended with 2.6, cu129 came with 2.8, cu132 is the newest named in
# the matrix's cuda.toml); an index that does not exist (HTTP 404) is said and counts as empty, not as down.
PYTORCH_CUDA_INDEXES = ("cu126", "cu128", "cu129", "cu130", "cu132")
_TORCH_FEEDS = tuple(
    OutsideFeed(f"download.pytorch.org {cu}", "simple", f"whl/{cu}/torch/", "torch_pytorch_org",
                "download.pytorch.org", "torch", "2.6") for cu in PYTORCH_CUDA_INDEXES)
OUTSIDE_FEEDS = (
    *_TORCH_FEEDS,
    OutsideFeed("turboderp-org/exllamav3 releases", "github", "repos/turboderp-org/exllamav3/releases",
                "exllamav3_github", "turboderp-org/exllamav3", "exllamav3", "0.0.1"),
    OutsideFeed("Dao-AILab/flash-attention releases", "github", "repos/Dao-AILab/flash-attention/releases",
                "flash_attn_github", "Dao-AILab/flash-attention", "flash-attn", "2.6"),
    OutsideFeed("Dao-AILab/causal-conv1d releases", "github", "repos/Dao-AILab/causal-conv1d/releases",
                "causal_conv1d_github", "Dao-AILab/causal-conv1d", "causal-conv1d", "1.4"),
    OutsideFeed("mjun0812/flash-attention-prebuild-wheels releases", "github",
                "repos/mjun0812/flash-attention-prebuild-wheels/releases", "flash_attn_prebuilt_github",
                "mjun0812/flash-attention-prebuild-wheels", "flash-attn", "2.6"),
)


def check_root(flag: str, url: str, example: str) -> str:
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        raise BadInput(f"{flag} {url!r}: not an http(s) URL; give the source's root like {example}")
    return url.rstrip("/")


def feed_url(feed: OutsideFeed, pytorch_index: str, github_api: str) -> str:
    if feed.kind == "simple":
        return f"{pytorch_index}/{feed.path}"
    return f"{github_api}/{feed.path}?per_page=100"


# -- parsing ------------------------------------------------------------------------------------------------------
class _YankAwareAnchors(_Anchors):
    """PEP 503 anchors, minus those PEP 592 marks ``data-yanked``."""

    def __init__(self) -> None:
        super().__init__()
        self.yanked: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a" and "data-yanked" in dict(attrs):
            href = dict(attrs).get("href")
            if href:
                self.yanked.append(href)
            return
        super().handle_starttag(tag, attrs)


def parse_simple(body: bytes, content_type: str, page_url: str, source: str) -> tuple[list[Listed], int]:
    """(wheels listed, yanked count) from a PEP 691 JSON or PEP 503 HTML project page."""
    text = body.decode("utf-8", "replace")
    if "json" in content_type:
        try:
            data = loads_json(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"malformed PEP 691 JSON ({exc.msg})") from None
        files = data.get("files") if isinstance(data, dict) else None
        if not isinstance(files, list):
            raise ValueError("answer is JSON without a `files` list (not a PEP 691 project page?)")
        listed, yanked = [], 0
        for item in files:
            if not isinstance(item, dict) or not str(item.get("filename", "")).endswith(".whl"):
                continue
            if item.get("yanked"):
                yanked += 1
                continue
            hashes = item.get("hashes") or {}
            if not isinstance(hashes, dict):
                raise ValueError(f"`hashes` of {str(item.get('filename'))[:80]!r} is {type(hashes).__name__}, not "
                                 "the object PEP 691 gives")
            digest = str(hashes.get("sha256", "")).lower()
            listed.append(Listed(url=urljoin(page_url, str(item.get("url", ""))), sha256=digest, source=source))
        return listed, yanked
    parser = _YankAwareAnchors()
    parser.feed(text)
    if "<a" not in text.lower() and not text.lstrip().lower().startswith(("<!doctype", "<html")):
        raise ValueError("answer is neither PEP 691 JSON nor a PEP 503 HTML page")
    listed = []
    for href in parser.hrefs:
        url, digest = _split_fragment(href)
        if urlsplit(url).path.endswith(".whl"):
            listed.append(Listed(url=urljoin(page_url, url), sha256=digest, source=source))
    return listed, len(parser.yanked)


def parse_github_releases(data: object, source: str, pre: bool) -> tuple[list[Listed], list[str]]:
    """(wheel assets, lines) from one page of GitHub's "List releases" answer."""
    if not isinstance(data, list):
        message = data.get("message") if isinstance(data, dict) else None
        raise ValueError(f"GitHub answered {message!r}" if message else
                         "answer is not the JSON list GitHub's releases API returns")
    listed: list[Listed] = []
    lines: list[str] = []
    pres = []
    unpinned = 0
    for release in data:
        if not isinstance(release, dict) or release.get("draft"):
            continue
        tag = str(release.get("tag_name", ""))
        if release.get("prerelease") and not pre:
            pres.append(tag)
            continue
        assets = release.get("assets") or []
        if not isinstance(assets, list):
            raise ValueError(f"release {tag[:80]!r}: `assets` is {type(assets).__name__}, not the list GitHub gives")
        for asset in assets:
            if not isinstance(asset, dict) or not str(asset.get("name", "")).endswith(".whl"):
                continue
            digest = str(asset.get("digest") or "")
            sha256 = digest[len("sha256:"):].lower() if digest.startswith("sha256:") else ""
            if not sha256:
                unpinned += 1
            listed.append(Listed(url=str(asset.get("browser_download_url", "")), sha256=sha256, source=source,
                                 release=tag))
    if unpinned:
        # Recorded without one, never hashed here: a stack that resolves to such a wheel is refused until the
        # release publishes its digest (docs/security.md, "Every download pinned").
        lines.append(f"{unpinned} wheel asset(s) without a published sha256 digest: a stack using one is refused")
    if pres:
        lines.append(f"{len(pres)} pre-release(s) left out ({', '.join(pres[:3])}{' ...' if len(pres) > 3 else ''})"
                     ": pass --pre to include them")
    return listed, lines


def _next_page(link_header: str) -> str:
    for part in link_header.split(","):
        match = re.match(r'\s*<([^>]+)>\s*;\s*rel="next"', part)
        if match:
            return match[1]
    return ""


# -- fetching -----------------------------------------------------------------------------------------------------
def _headers(feed: OutsideFeed) -> dict[str, str]:
    if feed.kind == "github":
        from labwright.schema.env import read

        token = read("GITHUB_TOKEN") or ""  # a line break would reach the Authorization header: refused
        return {"X-GitHub-Api-Version": "2022-11-28", **({"Authorization": f"Bearer {token}"} if token else {})}
    return {}


def refresh_outside(out_dir: Path, components: dict[str, Component], state: dict, *, pytorch_index: str,
                    github_api: str, packages: set[str] | None, pre: bool, timeout: float, today: str,
                    dry_run: bool) -> tuple[list, list[Path]]:
    """Fetch each outside feed (conditionally) and write the files whose data changed; the outcomes (registry.Outcome
    with ``package`` = the feed's name and ``url``) in OUTSIDE_FEEDS order."""
    from labwright.matrix import registry

    feeds = [f for f in OUTSIDE_FEEDS if packages is None or canonicalize_name(f.package) in packages]
    for feed in feeds:  # each worker below then touches only its own record
        state["sources"].setdefault(feed_url(feed, pytorch_index, github_api), {})["name"] = feed.name
    results = registry.side_by_side(lambda feed: _one(feed, feed_url(feed, pytorch_index, github_api), out_dir,
                                                      components, state, pre, timeout, today), feeds)
    outcomes = list(zip(feeds, results, strict=True))
    written: list[Path] = []
    stems: dict[str, list] = {}
    for feed, outcome in outcomes:
        stems.setdefault(feed.stem, []).append(outcome)
    for stem, parts in stems.items():
        if any(o.status == "unreachable" for o in parts) or all(o.status == "unchanged" for o in parts):
            if any(o.status == "unreachable" for o in parts):
                for o in parts:  # nothing of this file was written: the answers that came are asked for again
                    if o.status == "updated":
                        state["sources"][o.url].update(etag="", last_modified="", sha256="")
            continue
        kind = "simple-index" if parts[0].url.startswith(pytorch_index) else "github-releases"
        written += registry.write_family(out_dir / f"{stem}.toml", [w for o in parts for w in o.wheels], kind,
                                         [o.url for o in parts], registry._now(), dry_run)
    return [o for _, o in outcomes], written


def _one(feed: OutsideFeed, url: str, out_dir: Path, components: dict[str, Component], state: dict, pre: bool,
         timeout: float, today: str):
    from labwright.matrix import registry

    record = state["sources"].setdefault(url, {})
    path = out_dir / f"{feed.stem}.toml"
    now = registry._now()
    record["checked"] = now
    reusable = (path.exists() or record.get("wheels") == 0) and record.get("pre", False) == pre
    accept = SIMPLE_ACCEPT if feed.kind == "simple" else GITHUB_ACCEPT
    try:
        answer = registry.fetch(url, timeout, record.get("etag", "") if reusable else "",
                                record.get("last_modified", "") if reusable else "", accept=accept,
                                extra_headers=_headers(feed))
        digest = hashlib.sha256(answer.body).hexdigest() if answer.status == 200 else record.get("sha256", "")
        if reusable and (answer.status == 304 or digest == record.get("sha256")):
            record.update(ok=now, error="")
            kept = [w for w in wheels_from_rows(existing_rows(path) or [], str(path))
                    if w.package == feed.package and (w.source == feed.source)
                    and (feed.kind != "simple" or f"/{feed.path.split('/')[1]}/" in w.url)]
            return registry.Outcome(feed.name, "unchanged", wheels=kept, newest=record.get("newest", ""), url=url)
        if answer.status == 304:
            raise registry.Unreachable("HTTP 304 to a request without validators")
        listed, lines = _parse(feed, url, answer, pre, timeout)
    except registry.Unreachable as exc:
        if feed.kind == "simple" and str(exc).startswith("HTTP 404"):  # no such index (yet): nothing to list
            again = record.get("missing") and record.get("pre", False) == pre
            record.update(etag="", last_modified="", sha256="", ok=now, error="", newest="", wheels=0, pre=pre,
                          missing=True, changed=record.get("changed") if again else now)
            return registry.Outcome(feed.name, "unchanged" if again else "updated",
                                    lines=["no such index (HTTP 404): nothing listed"], url=url)
        record.update(error=str(exc), error_at=now)
        return registry.Outcome(feed.name, "unreachable", lines=[str(exc)], url=url)
    first_seen = {str(r.get("url")): str(r.get("seen")) for r in (existing_rows(path) or []) if r.get("seen")}
    wheels, newest = _rows(feed, listed, components, lines, first_seen, today)
    record.update(etag=answer.etag, last_modified=answer.last_modified, sha256=digest, pre=pre, ok=now,
                  changed=now, error="", newest=newest, wheels=len(wheels), missing=False)
    return registry.Outcome(feed.name, "updated", wheels=wheels, lines=lines, newest=newest, url=url)


def _parse(feed: OutsideFeed, url: str, answer, pre: bool, timeout: float) -> tuple[list[Listed], list[str]]:
    from labwright.matrix import registry

    if feed.kind == "simple":
        try:
            listed, yanked = parse_simple(answer.body, answer.content_type, url, feed.source)
        except ValueError as exc:
            raise registry.Unreachable(str(exc)) from None
        return listed, [f"{yanked} yanked file(s) left out (PEP 592)"] if yanked else []
    listed, lines = [], []
    page, body, link = 1, answer.body, answer.link
    while True:
        try:
            found, said = parse_github_releases(loads_json(body), feed.source, pre)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise registry.Unreachable(f"malformed JSON on page {page}") from None
        except ValueError as exc:
            raise registry.Unreachable(str(exc)) from None
        listed += found
        lines += said
        following = _next_page(link)
        if following and page >= MAX_PAGES:
            lines.append(f"stopped after {MAX_PAGES} pages of releases: older releases not read")
        if not following or page >= MAX_PAGES:
            break
        page += 1
        more = registry.fetch(following, timeout, accept=GITHUB_ACCEPT, extra_headers=_headers(feed))
        body, link = more.body, more.link
    return listed, lines


def _rows(feed: OutsideFeed, listed: list[Listed], components: dict[str, Component], lines: list[str],
          first_seen: dict[str, str], today: str) -> tuple[list[Wheel], str]:
    floor = Version(feed.floor)
    rows: list[Wheel] = []
    newest: Version | None = None
    others = 0
    for item in listed:
        try:
            name = parse_wheel_filename(item.url)
        except WheelNameError as exc:
            lines.append(str(exc))
            continue
        if canonicalize_name(name.name) != canonicalize_name(feed.package):
            others += 1
            continue
        try:
            version = Version(name.public_version)
        except InvalidVersion:
            continue
        if version < floor or not _linux_platform(name.platform_tag):
            continue
        row = wheel_from_listed(item, components)
        if isinstance(row, str):
            lines.append(row)
            continue
        rows.append(replace(row, seen=first_seen.get(row.url, today)))
        newest = max(newest, version) if newest else version
    if others:
        lines.append(f"{others} wheel(s) of other projects left out")
    return rows, str(newest or "")


def _linux_platform(platform: str) -> bool:
    return "linux" in platform and ("x86_64" in platform or "aarch64" in platform)
