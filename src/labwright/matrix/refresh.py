"""`labwright matrix refresh`: turn an upstream wheel listing into a wheels_matrix/*.toml file.

Three listing kinds, all reduced to "a URL (and maybe a sha256) per wheel" before the file name is parsed:
- flash-attn-prebuilt: mjun0812/flash-attention-prebuild-wheels' doc/packages.md (markdown tables of links);
- pip-index: a PEP 503 / pip `--find-links` HTML page (download.pytorch.org/whl/cu130/torch/ is one);
- wheel-list: one URL or file name per line, with optional `key=value` words (sha256=, release=, source=, note=)
  and `# source: ...` / `# base-url: ...` header lines for the whole file.
What each wheel was built against comes from its file name alone (wheelname.py), so a listing needs nothing more.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from packaging.version import Version

from labwright import textio
from labwright.atomic import write_text_atomic
from labwright.errors import BadInput, OperationFailed
from labwright.matrix.model import Component, Wheel
from labwright.matrix.wheelname import WheelNameError, parse_wheel_filename

KINDS = ("flash-attn-prebuilt", "pip-index", "wheel-list")
PREBUILT_SOURCE = "mjun0812/flash-attention-prebuild-wheels"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Listed:
    """One wheel as a listing names it, before its file name is read."""

    url: str
    sha256: str = ""
    source: str = ""
    release: str = ""
    note: str = ""


@dataclass
class RefreshReport:
    path: Path
    wheels: list[Wheel]
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def guess_kind(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".md":
        return "flash-attn-prebuilt"
    if suffix in (".html", ".htm"):
        return "pip-index"
    return "wheel-list"


_LINK = re.compile(r"(?a)\[Download\d+\((?P<release>[^)]*)\)\]\((?P<url>[^)\s]+\.whl)\)")


def parse_prebuilt_markdown(text: str) -> tuple[list[Listed], list[str]]:
    """Links from the prebuilt listing's tables; rows whose columns disagree with the file name are reported."""
    listed: list[Listed] = []
    warnings: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for match in _LINK.finditer(line):
            listed.append(Listed(url=match["url"], source=PREBUILT_SOURCE, release=match["release"]))
            if len(cells) >= 3:
                label = parse_wheel_filename(match["url"]).label
                if label.torch and label.torch != cells[1]:
                    warnings.append(f"line {number}: table says torch {cells[1]}, file name says {label.torch}")
    if not listed:
        raise BadInput("no [DownloadN(vX)](URL.whl) links found: is this mjun0812's doc/packages.md? "
                       "pass --kind pip-index or --kind wheel-list for other listings")
    return listed, warnings


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _split_fragment(url: str) -> tuple[str, str]:
    """`...whl#sha256=abc` -> (`...whl`, `abc`); other fragments are dropped."""
    base, _, fragment = url.partition("#")
    digest = fragment[len("sha256="):] if fragment.startswith("sha256=") else ""
    return base, digest.lower()


def parse_pip_index(text: str, base_url: str = "", source: str = "") -> list[Listed]:
    """Anchors to .whl files in a simple-index page; relative links are resolved against `base_url`."""
    parser = _Anchors()
    parser.feed(text)
    listed = []
    for href in parser.hrefs:
        url, digest = _split_fragment(href)
        if not urlsplit(url).path.endswith(".whl"):
            continue
        if base_url and "://" not in url:
            url = urljoin(base_url if base_url.endswith("/") else base_url + "/", url)
        listed.append(Listed(url=url, sha256=digest, source=source))
    if not listed:
        raise BadInput("no <a href=...whl> links found: is this a pip index page? pass --kind for other listings")
    return listed


def parse_wheel_list(text: str, base_url: str = "", source: str = "") -> list[Listed]:
    defaults = {"source": source, "base-url": base_url, "note": ""}
    listed = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            key, sep, value = line.lstrip("#").partition(":")
            if sep and key.strip() in defaults and not (key.strip() == "source" and source):
                defaults[key.strip()] = value.strip()
            continue
        # `note=` takes the rest of the line, so a note may contain spaces
        line, _, note = line.partition(" note=")
        words = line.split()
        url, digest = _split_fragment(words[0])
        extra: dict[str, str] = {"note": note.strip()} if note else {}
        for word in words[1:]:
            key, sep, value = word.partition("=")
            if not sep or key not in ("sha256", "release", "source"):
                raise BadInput(f"line {number}: {word!r} is not key=value with key sha256, release, source or note")
            extra[key] = value
        if "://" not in url and defaults["base-url"]:
            url = defaults["base-url"].rstrip("/") + "/" + url
        listed.append(Listed(
            url=url,
            sha256=(extra.get("sha256") or digest).lower(),
            source=extra.get("source", defaults["source"]),
            release=extra.get("release", ""),
            note=extra.get("note", defaults["note"]),
        ))
    return listed


def _at_least(version: str, floor: str) -> bool:
    return bool(floor) and Version(version.split("+", 1)[0]) >= Version(floor)


def wheel_from_listed(item: Listed, components: dict[str, Component]) -> Wheel | str:
    """A Wheel row, or the reason the listed file is not one the matrix keeps."""
    try:
        name = parse_wheel_filename(item.url)
    except WheelNameError as exc:
        return str(exc)
    if item.sha256 and not _SHA256.match(item.sha256):
        return f"{name.filename}: sha256 {item.sha256!r} is not 64 hex digits"
    label = name.label
    if label.ngc:
        return f"{name.filename}: built for NVIDIA container {label.ngc}, not for a pip torch"
    if label.rocm:
        return f"{name.filename}: a ROCm build; labwright targets NVIDIA GPUs"
    component = next((c for c in components.values() if name.name in c.packages), None)
    is_torch = name.name == "torch"
    requires_torch = ""
    cxx11_abi = label.cxx11_abi
    if component is not None:
        if component.pure_python:
            requires_torch = component.requires_torch
        elif _at_least(name.version, component.pins_build_torch_since) and label.torch_build:
            requires_torch = f"=={label.torch_build}"
        if is_torch and _at_least(name.version, component.cxx11_abi_since):
            cxx11_abi = "TRUE"
    return Wheel(
        package=name.name,
        version=name.version,
        python=name.python_tag,
        abi=name.abi_tag,
        platform=name.platform_tag,
        torch="" if is_torch else label.torch,
        torch_build="" if is_torch else label.torch_build,
        cuda=label.cuda,
        cxx11_abi=cxx11_abi,
        url=item.url,
        sha256=item.sha256,
        source=item.source,
        release=item.release,
        requires_torch=requires_torch,
        note=item.note,
    )


def _sort_key(wheel: Wheel) -> tuple:
    release = re.sub(r"[^0-9.]", "", wheel.release).strip(".") or "0"
    return (wheel.package, Version(wheel.public_version), wheel.version, wheel.python, wheel.platform,
            Version(release) if re.fullmatch(r"(?a)\d+(\.\d+)*", release) else Version("0"), wheel.url)


def toml_string(value: str) -> str:
    # JSON string escapes are valid TOML basic-string escapes.
    return json.dumps(value, ensure_ascii=False)


def render_toml(wheels: list[Wheel], header: dict[str, str | int]) -> str:
    lines = ["# Generated by `labwright matrix refresh`; edit the listing under sources/ and re-run, not this file."]
    lines += [f"{k} = {toml_string(v) if isinstance(v, str) else v}" for k, v in header.items()]
    lines.append("wheels = [")
    for wheel in wheels:
        cells = ", ".join(f"{k} = {toml_string(v)}" for k, v in wheel.to_row().items())
        lines.append(f"  {{ {cells} }},")
    lines.append("]")
    return "\n".join(lines) + "\n"


def read_listing(path: Path, kind: str, base_url: str = "", source: str = "") -> tuple[list[Listed], list[str]]:
    if kind not in KINDS:
        raise BadInput(f"--kind {kind!r} is unknown: use one of {', '.join(KINDS)}")
    if base_url and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", base_url):
        raise BadInput(f"--base-url {base_url!r}: not an http(s) URL; give one like "
                       "https://download.pytorch.org/whl/cu130/torch/")
    text = textio.read_text(path, f"a wheel listing (--from, {kind})")
    try:
        if kind == "flash-attn-prebuilt":
            return parse_prebuilt_markdown(text)
        if kind == "pip-index":
            return parse_pip_index(text, base_url, source), []
        return parse_wheel_list(text, base_url, source), []
    except BadInput as exc:
        raise BadInput(f"--from {path}: {exc}") from None


def check_out_dir(out_dir: Path, stem: str) -> None:
    """BadInput unless ``out_dir`` is a writable directory or can be made one (checked before --dry reports,
    so a dry run never approves what the real run cannot write)."""
    existing = next((p for p in (out_dir, *out_dir.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        where = f"{existing} is a file" if existing is not None else "no part of it exists"
        raise BadInput(f"--out {out_dir}: {where}, not a directory; pass the directory to write {stem}.toml into")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise BadInput(f"--out {out_dir}: {existing} is not writable; pick a directory you can write to")


def family_of(stem: str, components: dict[str, Component]) -> Component | None:
    """The component a matrix file name says it holds: ``torch``, ``flash_attn_prebuilt`` -> flash_attn (the longest
    component name that is the stem or the stem's first ``_`` words); None for a name that names none."""
    normal = stem.replace("-", "_").lower()
    named = [c for c in components.values() if normal == c.name or normal.startswith(c.name + "_")]
    return max(named, key=lambda c: len(c.name)) if named else None


def _component_name(package: str, components: dict[str, Component]) -> str:
    return next((c.name for c in components.values() if package in c.packages), package)


def _packages(wheels: list[Wheel]) -> str:
    counts: dict[str, int] = {}
    for wheel in wheels:
        counts[wheel.package] = counts.get(wheel.package, 0) + 1
    return ", ".join(f"{count} {package}" for package, count in sorted(counts.items()))


def existing_rows(path: Path) -> list[dict[str, object]] | None:
    """The wheel rows of a matrix file about to be replaced (None: no such file, or one without a wheel list)."""
    if not path.exists():
        return None
    data = textio.read_toml(path, "the matrix file that --name/--out would replace (fix or remove it, or pick "
                                  "another --name)")
    rows = data.get("wheels")
    if rows is None:
        raise BadInput(f"--out file {path} is a hand-written matrix file (no `wheels` list): pick another --name")
    if not isinstance(rows, list):
        raise BadInput(f"--out file {path}: `wheels` is not a list: fix or remove it, or pick another --name")
    return [row for row in rows if isinstance(row, dict)]


def check_replacement(stem: str, path: Path, wheels: list[Wheel], components: dict[str, Component],
                      listing: Path, allow_shrink: bool = False) -> None:
    """Refuse to write wheels of one family into another family's file, or to shrink a file to a fraction of itself.

    ``matrix refresh --from flash_attn_prebuilt.md --name torch`` once replaced torch.toml with flash-attn wheels
    (exit 0; every later resolve said "no such torch wheel"). A file's family is its name's (``family_of``) or,
    for a name that names no component, what the file already holds.
    """
    family = family_of(stem, components)
    if family is not None:
        # Another component's wheels never belong here; packages no component claims (flash-attn-3 in the
        # prebuilt listing) ride along with the family's own, but cannot stand in for them.
        known = {p for c in components.values() for p in c.packages}
        foreign = [w for w in wheels if w.package in known and w.package not in family.packages]
        if not foreign and not any(w.package in family.packages for w in wheels):
            foreign = wheels
        if foreign:
            raise BadInput(
                f"--name {stem}: {stem}.toml holds {family.display} wheels ({', '.join(family.packages)}) but "
                f"{listing} lists {_packages(foreign)}: pass the {family.display} listing, or a --name for what it "
                f"lists (e.g. --name {_component_name(foreign[0].package, components)}_{listing.stem})")
    old = existing_rows(path)
    if not old:
        return
    had = {_component_name(str(row.get("package", "")), components) for row in old}
    new = {_component_name(w.package, components) for w in wheels}
    if family is None and not new <= had:
        raise BadInput(f"--name {stem}: {path} holds {', '.join(sorted(had))} wheels but {listing} lists "
                       f"{', '.join(sorted(new - had))}: pass the right listing, or another --name")
    if len(wheels) * 2 < len(old) and not allow_shrink:
        raise BadInput(f"--from {listing}: {len(wheels)} usable wheels would replace the {len(old)} in {path}: a "
                       "truncated or filtered listing? pass the full listing, or --allow-shrink if the drop is meant")


def refresh(
    listing: Path,
    out_dir: Path,
    components: dict[str, Component],
    kind: str | None = None,
    name: str | None = None,
    base_url: str = "",
    source: str = "",
    dry_run: bool = False,
    allow_shrink: bool = False,
) -> RefreshReport:
    """Parse `listing` and write `out_dir/<name or listing stem>.toml`; returns what was kept and skipped.

    Refuses (BadInput, nothing written) a listing whose wheels are not the family the file holds, and one that would
    leave fewer than half the wheels the file had (unless ``allow_shrink``). The write is atomic; the file it
    replaces is kept beside it as ``NAME.toml.prev`` (not read by the matrix loader, which reads ``*.toml``).
    """
    kind = kind or guess_kind(listing)
    stem = name or listing.stem
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", stem) or f"{stem}.toml" in ("cuda.toml", "components.toml", "stacks.toml"):
        raise BadInput(f"--name {stem!r}: use letters, digits, '_', '-' and not cuda/components/stacks")
    check_out_dir(out_dir, stem)
    listed, warnings = read_listing(listing, kind, base_url, source)
    wheels: dict[str, Wheel] = {}
    skipped = []
    for item in listed:
        row = wheel_from_listed(item, components)
        if isinstance(row, str):
            skipped.append(row)
            continue
        if row.url in wheels:
            # the same URL listed twice: keep the one that knows more (a sha256)
            old = wheels[row.url]
            wheels[row.url] = row if row.sha256 and not old.sha256 else old
            continue
        wheels[row.url] = row
    if not wheels:
        raise BadInput(f"--from {listing}: no usable wheels ({len(skipped)} skipped): check --kind ({kind})")
    ordered = sorted(wheels.values(), key=_sort_key)
    path = out_dir / f"{stem}.toml"
    check_replacement(stem, path, ordered, components, listing, allow_shrink)
    try:
        shown_source = str(listing.resolve().relative_to(out_dir.resolve()))
    except ValueError:
        shown_source = listing.name
    header: dict[str, str | int] = {"kind": kind, "listing": shown_source, "count": len(ordered)}
    if not dry_run:
        write_matrix_file(path, render_toml(ordered, header))
    return RefreshReport(path=path, wheels=ordered, skipped=skipped, warnings=warnings)


def write_matrix_file(path: Path, text: str) -> None:
    """Write ``path`` atomically, keeping what it replaces as ``NAME.toml.prev`` (labwright.atomic's keep_previous;
    the loader reads ``*.toml`` only); an unchanged file is not rewritten."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.read_bytes() == text.encode("utf-8"):
            return
        write_text_atomic(path, text, keep_previous=True)
    except OSError as exc:
        raise OperationFailed(f"{path}: cannot write it ({exc.strerror or type(exc).__name__}): pick a writable "
                              "--out") from None
