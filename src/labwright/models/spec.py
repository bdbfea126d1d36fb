"""What to download: a Hugging Face repo at a revision (all files, or those the allow/ignore patterns pick), or one GGUF
file of it; checked here, before anything runs in a guest.

The repo id rules are huggingface_hub's own (``utils/_validators.py`` ``validate_repo_id``, huggingface_hub 2.4.0,
lines 28-39 and 94-150): ``name`` or ``namespace/name``, each part 1-96 of ``[A-Za-z0-9_.-]`` starting and ending with
a letter, digit or ``_``, no ``--`` or ``..``, not ending in ``.git``. A revision is a branch or tag name (git's
check-ref-format rules, the ones the Hub's refs follow) or a 40-hex commit id (``file_download.py`` line 81,
``REGEX_COMMIT_HASH``). Patterns are the fnmatch patterns ``snapshot_download`` takes (``utils/_paths.py``
``filter_repo_objects``).

A bad value is one BadInput line naming the data key (``model_repo``, ...) and the fix.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from labwright.errors import BadInput
from labwright.schema import checks

PREFIX = "model"
KEYS = ("repo", "revision", "allow", "ignore", "file", "name")
DEFAULT_REVISION = "main"
DEFAULT_ENDPOINT = "https://huggingface.co"

# huggingface_hub 2.4.0 utils/_validators.py lines 28-39, with re.ASCII as there.
REPO_PART = re.compile(r"\b[\w\-.]{1,96}\b", re.ASCII)
COMMIT = re.compile(r"[0-9a-f]{40}")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
MAX_PATTERNS = 64
MAX_PATTERN_LENGTH = 256


def _fail(key: str, message: str) -> BadInput:
    return BadInput(f"{PREFIX}_{key}: {message}")


def check_repo(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail("repo", "is required: the Hugging Face repo id, e.g. Qwen/Qwen3-0.6B")
    repo = value.strip()
    parts = repo.split("/")
    if len(parts) > 2:
        raise _fail("repo", f"{repo!r} has {len(parts) - 1} '/': give NAME or NAMESPACE/NAME, e.g. Qwen/Qwen3-0.6B")
    for part in parts:
        if not REPO_PART.fullmatch(part):
            raise _fail("repo", f"{repo!r}: each part is 1-96 of A-Z a-z 0-9 _ . - and starts and ends with a letter, "
                        "digit or _ (e.g. Qwen/Qwen3-0.6B)")
    if "--" in repo or ".." in repo:
        raise _fail("repo", f"{repo!r} contains '--' or '..', which the Hub refuses in a repo id")
    if repo.endswith(".git"):
        raise _fail("repo", f"{repo!r} ends in .git: give the repo id without it")
    return repo


def check_revision(value: Any) -> str:
    """A commit id, or a branch/tag name by git's check-ref-format rules."""
    if value is None or value == "":
        return DEFAULT_REVISION
    if not isinstance(value, str):
        raise _fail("revision", f"{value!r} is not a branch, tag or commit id")
    revision = value.strip()
    if COMMIT.fullmatch(revision):
        return revision
    bad = (not revision or len(revision) > 255 or revision.startswith(("/", "-", ".")) or revision.endswith(
        ("/", ".", ".lock")) or ".." in revision or "//" in revision or "@{" in revision or revision == "@"
        or re.search(r"[\x00-\x20\x7f~^:?*\[\\]", revision) or "/." in revision)
    if bad:
        raise _fail("revision", f"{revision!r} is not a branch or tag name (git's ref rules) nor a 40-hex commit id: "
                    "use e.g. main, v1.0 or the commit's full id")
    if re.fullmatch(r"[0-9a-fA-F]{7,39}|[0-9A-F]{40}", revision):
        raise _fail("revision", f"{revision!r} looks like an abbreviated or upper-case commit id: the Hub resolves "
                    "only the full 40-character lower-case id")
    return revision


def _patterns(key: str, value: Any) -> tuple[str, ...]:
    if value is None or value == "" or value == []:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(item, str) for item in items):
        raise _fail(key, f"{value!r} is not a pattern or a list of patterns, e.g. [\"*.safetensors\", \"*.json\"]")
    if len(items) > MAX_PATTERNS:
        raise _fail(key, f"{len(items)} patterns; at most {MAX_PATTERNS}")
    patterns: list[str] = []
    for item in items:
        pattern = item.strip()
        if not pattern or len(pattern) > MAX_PATTERN_LENGTH or re.search(r"[\x00-\x1f\x7f]", pattern):
            raise _fail(key, f"{item!r} is not a file pattern (empty, too long or with control characters)")
        if pattern.startswith("/") or ".." in PurePosixPath(pattern).parts or "\\" in pattern:
            raise _fail(key, f"{item!r}: patterns match paths inside the repo (no leading /, no .., no \\)")
        patterns.append(pattern)
    return tuple(patterns)


def check_file(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _fail("file", f"{value!r} is not a file path inside the repo")
    path = value.strip()
    parts = PurePosixPath(path).parts
    if (not parts or path.startswith("/") or "\\" in path or any(p in (".", "..") for p in parts)
            or re.search(r"[\x00-\x1f\x7f]", path) or len(path) > 1024):
        raise _fail("file", f"{value!r} is not a path inside the repo (relative, no . or .. parts), e.g. "
                    "qwen3-0.6b-q8_0.gguf")
    if not path.lower().endswith(".gguf"):
        raise _fail("file", f"{path!r} is not a .gguf file: model_file names one GGUF file; for other files use "
                    "model_allow patterns")
    return path


def check_name(value: Any, repo: str) -> str:
    if value is None or value == "":
        value = repo.split("/")[-1]
    if not isinstance(value, str) or not NAME.fullmatch(value.strip()) or ".." in value:
        raise _fail("name", f"{value!r} is not a directory name: 1-96 of A-Z a-z 0-9 . _ - starting with a letter or "
                    "digit (it becomes MODELS_DIR/NAME)")
    return value.strip()


def check_dir(key: str, value: Any) -> str:
    """An absolute guest path without spaces, quotes or wildcards, not a system directory: labwright.schema.checks'
    ManagedDir (normalised: ``/srv/models/`` is ``/srv/models``)."""
    text = str(value or "").strip()
    try:
        if re.search(r"[*?]", text):
            raise ValueError("a wildcard")
        return checks.managed_dir(text)
    except ValueError:
        raise _fail(key, f"{value!r} must be a dedicated absolute path (not a system directory such as /, /usr or "
                    "/etc) without spaces, quotes, wildcards or .., e.g. /srv/models") from None


def check_endpoint(value: Any) -> str:
    text = str(value or DEFAULT_ENDPOINT).strip().rstrip("/")
    try:
        checks.url(text)  # a real host and port 1-65535: http://[::1/v1 and http://hub:0 refused
        valid = True
    except ValueError:
        valid = False
    if not valid or not re.fullmatch(r"(?a)https?://[A-Za-z0-9.\-\[\]:]+(:\d{1,5})?(/[A-Za-z0-9._~/\-]*)?", text):
        raise _fail("endpoint", f"{value!r} is not a Hub URL: http(s)://HOST[:PORT][/PATH], e.g. "
                    f"{DEFAULT_ENDPOINT} or a mirror")
    return text


@dataclass(frozen=True)
class ModelSpec:
    repo: str
    revision: str = DEFAULT_REVISION
    allow: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    file: str | None = None
    name: str = field(default="")

    def as_json(self) -> dict[str, Any]:
        """What the runner takes (``--spec``) and the marker records."""
        return {"repo": self.repo, "revision": self.revision, "allow": list(self.allow), "ignore": list(self.ignore),
                "file": self.file, "name": self.name}

    def digest(self) -> str:
        """Same spec, same digest: the runner's marker names it, so a changed spec is downloaded again."""
        return hashlib.sha256(json.dumps(self.as_json(), sort_keys=True).encode()).hexdigest()

    def label(self) -> str:
        what = self.file or (f"allow {','.join(self.allow)}" if self.allow else "all files")
        if self.ignore and not self.file:
            what += f", ignore {','.join(self.ignore)}"
        return f"{self.repo}@{self.revision} ({what})"


def parse_spec(data: Mapping[str, Any]) -> ModelSpec:
    """A ModelSpec from ``{"repo": ..., "revision": ..., "allow": [...], "ignore": [...], "file": ..., "name": ...}``;
    unknown keys are refused (a typo never silently downloads something else)."""
    if not isinstance(data, Mapping):
        raise _fail("repo", f"{data!r}: give a table with repo (and revision, allow, ignore, file, name)")
    unknown = sorted(str(key) for key in data if key not in KEYS)
    if unknown:
        raise BadInput(f"model: unknown key {', '.join(unknown)}; the keys are {', '.join(KEYS)}")
    repo = check_repo(data.get("repo"))
    revision = check_revision(data.get("revision"))
    allow, ignore = _patterns("allow", data.get("allow")), _patterns("ignore", data.get("ignore"))
    file = check_file(data.get("file"))
    if file and (allow or ignore):
        raise _fail("file", f"{file!r} with model_allow/model_ignore: name one GGUF file, or patterns, not both")
    return ModelSpec(repo=repo, revision=revision, allow=allow, ignore=ignore, file=file,
                     name=check_name(data.get("name"), repo))
