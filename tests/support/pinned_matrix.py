"""The packaged wheels matrix with a sha256 on every row, for tests that plan its stacks without downloading them.

The shipped matrix records the sha256 each index or release publishes where `labwright matrix refresh` could reach
the publisher; rows from GitHub releases refreshed where api.github.com did not answer have none, and a stack with
such a row is refused (docs/security.md, "Every download pinned"). Tests about what a plan looks like (ids, command
lines, --dry) plan against this copy: every missing sha256 is filled with a stand-in (the sha256 of the URL), which
no download is ever checked against.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

from labwright import paths

_ROW_URL = re.compile(r'(url = "([^"]+)")(?P<rest>[^}]*)\}')


def _fill(match: re.Match[str]) -> str:
    if "sha256 = " in match["rest"]:
        return match[0]
    stand_in = hashlib.sha256(f"labwright-test-stand-in:{match[2]}".encode()).hexdigest()
    return f'{match[1]}, sha256 = "{stand_in}"{match["rest"]}}}'


def pinned_matrix(target: Path) -> Path:
    """A copy of the packaged matrix in ``target`` (made once) with every wheel row carrying a sha256."""
    marker = target / ".complete"
    if marker.is_file():
        return target
    shutil.copytree(paths.packaged_matrix_dir(), target, dirs_exist_ok=True)
    for file in target.glob("*.toml"):
        text = file.read_text()
        if "wheels = [" in text:
            file.write_text(_ROW_URL.sub(_fill, text))
    marker.write_text("")
    return target
