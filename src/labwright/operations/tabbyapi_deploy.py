"""pyinfra operations behind labwright.deploys.tabbyapi: the pinned checkout, host-only API keys, config.yml.

The (re)start and health check is the shared labwright.operations.http.wait_healthy.

Each decides at execution time from the host's state (facts read then), so they see what the steps before them
did in the same run: config.yml is rendered after the checkout and already carries n-gram drafting on
config-era tabbyAPI (so the n-gram operation after it has nothing left to do there and a re-run changes nothing).
"""

from __future__ import annotations

import posixpath
import re
from io import StringIO

from pyinfra import host
from pyinfra.api import operation
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.files import File
from pyinfra.operations import files

from labwright.errors import LabwrightError
from labwright.facts.git import GitCheckout
from labwright.facts.tabbyapi import TabbyapiNgramFiles
from labwright.shell import quote
from labwright.snapshots.deploy import snapshot_command
from labwright.tabbyapi.ngram import MODEL_PY, TabbyTexts, plan_ngram

#: What a ref may be on the shell line that checks it out (git allows more; nobody pins those).
_REF = re.compile(r"[A-Za-z0-9._/+@-]+")


@operation()
def checkout(url: str, ref: str, dest: str):
    """
    tabbyAPI's source at ``ref`` (a tag, commit or branch) from ``url``, detached, at ``dest``.

    A tag or commit already checked out is a no-op without any network access; otherwise the remote is fetched
    and the ref resolved BEFORE anything is checked out: a ref the remote does not have fails with one line and
    leaves the tree as it was. Untracked files (config.yml, api_tokens.yml, the venv link) stay. Replacing an
    existing checkout snapshots the guest first (labwright.snapshots.deploy); a first checkout does not.

    **Example:**

    .. code:: python

        checkout(name="tabbyAPI source", url="https://github.com/theroyallab/tabbyAPI.git", ref="e632af4",
                 dest="/opt/tabbyapi")
    """
    if not _REF.fullmatch(ref) or ref.startswith("-"):
        raise OperationError(f"tabbyapi_ref: {ref!r} is not a git tag, branch or commit name (letters, digits and "
                             "._/+@- only, not starting with -); pin a ref the repository has, e.g. a commit hash")
    now = host.get_fact(GitCheckout, dest=dest, ref=ref)
    if now["head"] and now["origin"] == url and now["ref_commit"] == now["head"]:
        host.noop(f"{dest} is at {ref} ({now['head'][:12]})")
        return
    d, r, u = quote(dest), quote(ref), quote(url)
    git = f"git -C {d}"
    wanted = quote(f"{dest}/.git/labwright-wanted")
    missing = (f"labwright: tabbyapi_ref: {ref!r} does not exist at {url} (no such tag, branch or commit): nothing was "
               "checked out, the running service is untouched; pin a ref the repository has")
    unreachable = (f"labwright: tabbyapi_git_url: cannot fetch {url}: fix the URL or the guest's network "
                   "(nothing changed)")
    # 1. fetch and resolve the ref (the tree is not touched), 2. snapshot the guest when an existing checkout is about
    # to move to another commit (not on a first install; a branch that did not move takes none), 3. check it out.
    yield (
        f"set -e; command -v git >/dev/null || {{ echo 'labwright: git is not installed on the guest' >&2; exit 1; }}; "
        f"mkdir -p {d}; [ -d {d}/.git ] || git init -q {d}; "
        f"if {git} remote get-url origin >/dev/null 2>&1; then {git} remote set-url origin {u}; "
        f"else {git} remote add origin {u}; fi; "
        f"{git} fetch -q --force --tags origin '+refs/heads/*:refs/remotes/origin/*' "
        f"|| {{ echo {quote(unreachable)} >&2; exit 1; }}; "
        f"sha=''; for c in refs/tags/{r} refs/remotes/origin/{r} {r}; do "
        f"sha=$({git} rev-parse -q --verify \"$c^{{commit}}\" 2>/dev/null) && break; sha=''; done; "
        f"[ -n \"$sha\" ] || {{ echo {quote(missing)} >&2; exit 1; }}; "
        f"echo \"$sha\" > {wanted}"
    )
    if now["head"]:
        yield from snapshot_command(host, "tabbyapi-ref", only_if=(
            f"[ \"$(cat {wanted})\" != \"$({git} rev-parse -q --verify HEAD)\" ]"))
    yield (
        f"set -e; sha=$(cat {wanted}); rm -f {wanted}; "
        f"{git} -c advice.detachedHead=false checkout -q --force --detach \"$sha\"; "
        f"echo \"tabbyAPI source at {ref} ($sha)\""
    )


@operation()
def api_tokens(path: str, group: str):
    """
    tabbyAPI's ``api_tokens.yml`` (api_key, admin_key), generated ON THE HOST with Python's ``secrets`` the first
    time and never again: the keys never pass through the controller, the inventory or git. Mode 640, root:GROUP.
    """
    if not posixpath.isabs(path) or not group.strip():
        raise OperationError(f"api_tokens: path={path!r} must be absolute and group={group!r} a group name (an empty "
                             "group would leave the keys to root's own group)")
    info = host.get_fact(File, path=path)
    if info and info.get("mode") == 640 and info.get("user") == "root" and info.get("group") == group:
        host.noop(f"{path} exists (keys kept)")
        return
    script = ("import secrets; print(f'api_key: {secrets.token_hex(32)}'); "
              "print(f'admin_key: {secrets.token_hex(32)}')")
    p = quote(path)
    yield (f"umask 077; mkdir -p {quote(posixpath.dirname(path))}; "
           f"[ -s {p} ] || python3 -c {quote(script)} > {p}; "
           f"chown root:{quote(group)} {p}; chmod 640 {p}")


@operation()
def config(text: str, path: str, source: str, match_min: int, group: str):
    """
    Put the rendered ``config.yml``; with n-gram drafting on and a config-era tabbyAPI checked out, with
    ``draft_model.draft_mode: ngram`` / ``ngram_match_min`` already in it (the n-gram planner's own edit), so the
    n-gram operation that follows finds nothing to do. An n-gram shape the planner does not recognise fails here,
    before config.yml is touched.
    """
    if match_min:
        found = host.get_fact(TabbyapiNgramFiles, source=source, config=path)
        texts = TabbyTexts(found.model_py, found.config_sample, text, posixpath.join(source, MODEL_PY), path, source)
        try:
            change = plan_ngram(texts, match_min)
            change.raise_for_mode()
        except LabwrightError as exc:
            raise OperationError(str(exc)) from exc
        if change.mode == "config" and change.new_text is not None:
            text = change.new_text
    yield from files.put._inner(src=StringIO(text), dest=path, user="root", group=group, mode="640")
