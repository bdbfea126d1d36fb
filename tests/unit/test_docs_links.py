"""Every link in README.md and docs/*.md: relative links and images resolve to a file in the repository, every
#anchor to a heading (or an explicit ``<a id>``) of its target, as GitHub renders them; external links are listed
(``pytest -s`` prints them) and checked for shape only, never dialled.

Links inside fenced code blocks and inline code are not links (the docs show shell and Markdown examples there).
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

REPO = Path(__file__).resolve().parents[2]
# Every Markdown page of the repository, the ones beside code included (scripts/gpu-check/README.md, provenance
# notes); not the package's data (src/labwright/data, templates/, wheels_matrix/: listings recorded from upstream
# pages, their anchors theirs).
DATA = (REPO / "src" / "labwright" / "data", REPO / "templates", REPO / "wheels_matrix")
PAGES = sorted(path for path in REPO.rglob("*.md")
               if not {".git", ".venv", "node_modules", ".pytest_cache"} & set(path.relative_to(REPO).parts)
               and not any(data in path.parents for data in DATA))
FIELD_NOTES = REPO / "docs" / "field-notes.md"
SEED = re.compile(r"\bseeds?\b", re.IGNORECASE)

INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
HTML = re.compile(r"<(?:img|a|source)\b[^>]*?\b(?:src|href)=[\"']([^\"']+)[\"']", re.IGNORECASE)
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:[^>]*\s)?(?:id|name)=[\"']([^\"']+)[\"']", re.IGNORECASE)


def prose_lines(text: str, keep_code: bool = False) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks, inline code blanked out unless ``keep_code``."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        opened = FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        lines.append((number, line if keep_code else INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line)))
    return lines


def links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every link and image; a link's text may run over several lines (long image alt texts)."""
    text = page.read_text(encoding="utf-8")
    kept = dict(prose_lines(text))
    prose = "\n".join(kept.get(number, "") for number in range(1, text.count("\n") + 2))
    found: list[tuple[int, str]] = []
    for pattern in (INLINE, REFERENCE, HTML):
        found += [(prose.count("\n", 0, match.start()) + 1, match.group(1)) for match in pattern.finditer(prose)]
    return sorted(found)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: inline markup dropped, lower case, punctuation removed, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = text.strip().lower()
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LNM")
    return kept.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found: set[str] = set()
    text = page.read_text(encoding="utf-8")
    for _, line in prose_lines(text, keep_code=True):  # a heading's `code` is part of its anchor
        match = HEADING.match(line)
        if match:
            slug = github_slug(match.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    found.update(EXPLICIT_ANCHOR.findall(text))
    return frozenset(found)


def is_external(target: str) -> bool:
    return bool(urlsplit(target).scheme) or target.startswith("//")


def check(page: Path, target: str) -> str | None:
    """What is wrong with a relative link ``target`` on ``page``, or None."""
    path_part, _, fragment = target.partition("#")
    path_part = unquote(path_part.split("?", 1)[0])
    if path_part:
        resolved = (REPO if path_part.startswith("/") else page.parent) / path_part.lstrip("/")
        resolved = resolved.resolve()
        if not resolved.is_relative_to(REPO):
            return f"{target!r} points outside the repository"
        if not resolved.exists():
            return f"{target!r}: {resolved.relative_to(REPO)} does not exist"
    else:
        resolved = page
    if fragment:
        if resolved.is_dir() or resolved.suffix.lower() != ".md":
            return f"{target!r}: #{fragment} on a file that is not Markdown"
        if unquote(fragment).lower() not in anchors(resolved):
            return f"{target!r}: no heading #{fragment} in {resolved.relative_to(REPO)}"
    return None


def all_links() -> list[tuple[Path, int, str]]:
    return [(page, number, target) for page in PAGES for number, target in links(page)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_image_resolves(page: Path) -> None:
    broken = [f"{page.relative_to(REPO)}:{number}: {problem}" for number, target in links(page)
              if not is_external(target) and not target.startswith("mailto:")
              and (problem := check(page, target)) is not None]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_external_links_are_listed_and_well_formed_never_dialled(capsys: pytest.CaptureFixture[str]) -> None:
    external = sorted({target for _, _, target in all_links() if is_external(target)})
    malformed = [url for url in external if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc]
    with capsys.disabled():
        print(f"\n{len(external)} external links (listed, not dialled):")
        for url in external:
            print(f"  {url}")
    assert not malformed, f"external links that are not http(s)://HOST/...: {malformed}"


def test_docs_have_links_to_check() -> None:
    """The parser finds what it should: a regression here would make the test above pass vacuously."""
    targets = [target for _, _, target in all_links()]
    assert len(PAGES) > 20 and len(targets) > 30, (len(PAGES), len(targets))
    assert "docs/cli.md" in targets  # README's documentation list
    assert any("#" in target and not is_external(target) for target in targets)
    assert "img/tabbyapi-deploy.svg" in targets  # an image whose alt text runs over three lines


@pytest.mark.parametrize(("heading", "slug"), [
    ("Created by the deploy that needs them", "created-by-the-deploy-that-needs-them"),
    ("`labwright bench`: prefill and decode speed", "labwright-bench-prefill-and-decode-speed"),
    ("Errors (one line, non-zero exit, nothing half-written)", "errors-one-line-non-zero-exit-nothing-half-written"),
    ("KV cache: 8,8 vs 4,4 / Q8 + Q4", "kv-cache-88-vs-44--q8--q4"),
    ("[docs/cli.md](docs/cli.md) — the vocabulary", "docsclimd--the-vocabulary"),
])
def test_github_slug(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_a_missing_file_and_a_missing_anchor_are_reported(tmp_path: Path) -> None:
    page = REPO / "docs" / "bench.md"
    assert check(page, "no-such-page.md") is not None
    assert check(page, "cli.md#no-such-heading") is not None
    assert check(page, "#no-such-heading-here") is not None
    assert check(page, "../../../etc/passwd") is not None
    assert check(page, "cli.md") is None
    assert check(page, "gpu.md#gpu-architecture-labwright-gpu-arch-and-the-facts") is None  # `code` in a heading


@pytest.mark.parametrize("page", [p for p in PAGES if p != FIELD_NOTES], ids=lambda p: str(p.relative_to(REPO)))
def test_a_page_that_cites_the_field_notes_links_them(page: Path) -> None:
    """"The seed" means a field note the reader may not have: a page that cites one links docs/field-notes.md, where
    each is explained."""
    text = page.read_text(encoding="utf-8")
    cites = [number for number, line in prose_lines(text) if SEED.search(line)]
    if not cites:
        return
    linked = [target for _, target in links(page) if target.split("#")[0].endswith("field-notes.md")]
    assert linked, f"{page.relative_to(REPO)} cites the field notes (line {cites[0]}), never links docs/field-notes.md"
