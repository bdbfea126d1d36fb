"""pyinfra fact: where a git checkout stands, and whether a pinned ref is already checked out (no network).

**Example:**

.. code:: python

    from labwright.facts.git import GitCheckout
    now = host.get_fact(GitCheckout, dest="/opt/tabbyapi", ref="v1.2.0")
    now["head"], now["origin"], now["ref_commit"]  # ref_commit: the tag's or commit's sha when known locally
"""

from __future__ import annotations

import re
from typing import Any

from pyinfra.api import FactBase

from labwright.shell import quote

_MARK = "@@labwright-git-"
HEX_REF = re.compile(r"^[0-9a-f]{7,40}$")


class GitCheckout(FactBase[Any]):
    """``{"head": sha or None, "origin": URL or None, "ref_commit": sha or None}`` for the checkout at ``dest``.

    ``ref_commit`` resolves ``ref`` locally only where that cannot be stale: a tag (``refs/tags/REF``) or a
    commit id. A branch name always reads as None, so a deploy fetches it.

    + dest: the checkout directory
    + ref: the tag or commit wanted
    """

    def command(self, dest: str, ref: str) -> str:
        git = f"git -C {quote(dest)}"
        tag = quote(f"refs/tags/{ref}^{{commit}}")
        commit = f" || {git} rev-parse -q --verify {quote(ref + '^{commit}')}" if HEX_REF.match(ref) else ""
        return (
            f"if [ -d {quote(dest + '/.git')} ] && command -v git >/dev/null 2>&1; then "
            f"echo {_MARK}head; {git} rev-parse -q --verify HEAD 2>/dev/null; "
            f"echo {_MARK}origin; {git} remote get-url origin 2>/dev/null; "
            f"echo {_MARK}ref_commit; {{ {git} rev-parse -q --verify {tag}{commit}; }} 2>/dev/null; "
            "fi; true"
        )

    def process(self, output: list[str]) -> dict[str, Any]:
        found: dict[str, Any] = {"head": None, "origin": None, "ref_commit": None}
        current = None
        for line in output:
            if line.startswith(_MARK):
                current = line.removeprefix(_MARK).strip()
            elif current in found and line.strip() and found[current] is None:
                found[current] = line.strip()
        return found

    @staticmethod
    def default() -> dict[str, Any]:
        return {"head": None, "origin": None, "ref_commit": None}
