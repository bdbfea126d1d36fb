"""Root runs only root-owned code: what ``host upgrade --yes`` on a real node checks before the boot unit would run
labwright as root, and the installers' recorded checksums.

The boot unit (state.py) runs ``PYTHON -I -m labwright host upgrade NODE --resume`` as root at the next boot; that
run imports labwright from the interpreter's site-packages, ``exec()``s the inventory (a Proxmox upgrade reaching
the API over HTTPS) and runs NVIDIA's ``.run`` installers from the repository. Each of those paths must be one only
root can change, or the next boot runs whatever a user put there. The check is sshd's StrictModes, as OpenSSH's
``safe_path()`` (misc.c, openssh-portable 1982e36887a4) does it for authorized_keys: the file's canonical path must
be owned by root (there: root or the user) with neither group nor other write bits (``st_mode & 022``), and so must
every directory from it up to ``/``. A symlink's own directory is checked too (whoever may write it may point the
link elsewhere), and the labwright package is checked file by file. One refusal, one line: the path, why, the fix,
and that nothing was changed.

Installers: each ``NVIDIA-Linux-x86_64-VERSION.run`` in the repository has its sha256 recorded beside it when it
enters the repository, in ``NVIDIA-Linux-x86_64-VERSION.run.sha256sum`` (the file NVIDIA publishes next to the
installer: ``https://download.nvidia.com/XFree86/Linux-x86_64/VERSION/NVIDIA-Linux-x86_64-VERSION.run.sha256sum``,
``sha256sum`` format). Every run of an installer (host install, put-back, each guest's userspace) is verified
against it first; a missing record or a mismatch refuses in one line naming the file and both hashes.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from pathlib import Path

from labwright.digest import sha256_file
from labwright.errors import BadInput
from labwright.gpu.nvidia.upgrade_facts import installer_name

#: The owners trusted with code root runs (sshd also trusts the key's user; here only root is).
ROOT_UIDS: frozenset[int] = frozenset({0})
NVIDIA_URL = "https://download.nvidia.com/XFree86/Linux-x86_64/{version}/NVIDIA-Linux-x86_64-{version}.run"
SUMS_SUFFIX = ".sha256sum"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FIX_INSTALL = ("install labwright where only root can write and run it from there (sudo python3 -m venv "
                "/opt/labwright && sudo /opt/labwright/bin/pip install labwright; sudo /opt/labwright/bin/labwright "
                "host upgrade ...)")


def _bad(path: Path, st: os.stat_result, uids: frozenset[int]) -> str:
    """Why ``path`` is not root's alone ('' when it is): misc.c safe_path's test (owner, ``st_mode & 022``)."""
    if st.st_uid not in uids:
        return f"owned by uid {st.st_uid}, not root"
    if st.st_mode & 0o022:
        who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if st.st_mode & bit)
        return f"writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def _chain(path: Path, uids: frozenset[int], top: Path | None) -> tuple[Path, str] | None:
    """safe_path(): the canonical path itself, then every directory above it up to / (or ``top``, as sshd stops
    at the user's home): the first one that is not root's alone, and why."""
    real = Path(os.path.realpath(path))
    here = real
    while True:
        try:
            why = _bad(here, here.stat(), uids)
        except OSError as exc:
            return here, f"unreadable ({exc.strerror})"
        if why:
            return here, why
        if here == here.parent or (top is not None and here == top):
            return None
        here = here.parent


def untrusted(path: Path, uids: frozenset[int] = ROOT_UIDS, top: Path | None = None) -> tuple[Path, str] | None:
    """The first place on ``path``'s way that anyone but root may change: the file and its directories, and the
    directories of the link when ``path`` is a symlink (or has one on its way)."""
    found = _chain(path, uids, top)
    if found is None and Path(os.path.abspath(path)).parent != Path(os.path.realpath(path)).parent:
        found = _chain(Path(os.path.abspath(path)).parent, uids, top)
    return found


def _tree(root: Path) -> Iterator[Path]:
    for here, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            yield Path(here) / name


def untrusted_tree(root: Path, uids: frozenset[int] = ROOT_UIDS, top: Path | None = None) -> tuple[Path, str] | None:
    """``untrusted`` for a directory and every file and directory below it (a symlink: where it points)."""
    found = untrusted(root, uids, top)
    if found is not None:
        return found
    for path in _tree(root):
        try:
            st = path.lstat()
        except OSError as exc:
            return path, f"unreadable ({exc.strerror})"
        if stat.S_ISLNK(st.st_mode):
            found = untrusted(path, uids, top)
            if found is not None:
                return found
            continue
        why = _bad(path, st, uids)
        if why:
            return path, why
    return None


def code_paths(python: str | None = None) -> list[tuple[str, Path, bool]]:
    """What root imports at boot: (what, path, whole tree) for the interpreter, its site-packages (and the .pth
    files there, which add paths to it) and the labwright package."""
    import labwright

    paths: list[tuple[str, Path, bool]] = [("the interpreter", Path(python or sys.executable), False)]
    for key in ("purelib", "platlib"):
        site = Path(sysconfig.get_paths()[key])
        if site.is_dir() and all(site != p for _, p, _ in paths):
            paths.append(("its site-packages", site, False))
            paths += [("a .pth file of its site-packages", pth, False) for pth in sorted(site.glob("*.pth"))]
    paths.append(("the labwright package", Path(labwright.__file__).resolve().parent, True))
    return paths


def check_root_code(inventory: Path | None, repository: Path, python: str | None = None,
                    uids: frozenset[int] = ROOT_UIDS, top: Path | None = None,
                    code: Iterable[tuple[str, Path, bool]] | None = None) -> None:
    """BadInput, one line, for the first path root would run at the next boot that anyone but root may change:
    the interpreter, its site-packages, the labwright package, the inventory (None: not read at boot) and the
    installer repository with every file in it. ``uids``/``top`` are for tests (sshd's home directory stop)."""
    items = list(code if code is not None else code_paths(python))
    if inventory is not None:
        items.append(("the inventory", inventory, False))
    items.append(("the installer repository", repository, True))
    for what, path, tree in items:
        found = untrusted_tree(path, uids, top) if tree else untrusted(path, uids, top)
        if found is None:
            continue
        where, why = found
        real = Path(os.path.realpath(path))
        place = (str(where) if where == real else f"{where} (in {path})" if where.is_relative_to(real) else
                 f"{where} (on the way to {path})")
        fix = (_FIX_INSTALL if what in ("the interpreter", "its site-packages", "the labwright package")
               or what.startswith("a .pth") else
               f"make it root's and not group- or other-writable (chown root:root {where}; chmod go-w {where})")
        raise BadInput(f"host upgrade: {what} {place} is {why}, and the boot unit runs it as root at the next "
                       f"boot: {fix}; nothing was changed")


# --- installers ------------------------------------------------------------------------------------------------
def sums_file(installer: Path) -> Path:
    return installer.with_name(installer.name + SUMS_SUFFIX)


def recorded_sha256(installer: Path, version: str) -> str:
    """The sha256 recorded for ``installer`` (its .sha256sum beside it); BadInput naming the file and the fix."""
    sums = sums_file(installer)
    url = NVIDIA_URL.format(version=version)
    try:
        text = sums.read_text(errors="replace")
    except FileNotFoundError:
        raise BadInput(f"{installer}: no recorded sha256 ({sums.name} is not beside it); record NVIDIA's published "
                       f"one: curl -fsSLo {sums} {url}{SUMS_SUFFIX}; nothing was run") from None
    except OSError as exc:
        raise BadInput(f"{sums}: unreadable ({exc.strerror}); nothing was run") from None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 1 and _SHA256.match(fields[0].lower()) and (
                len(fields) == 1 or fields[-1].lstrip("*") == installer.name):
            return fields[0].lower()
    raise BadInput(f"{sums}: no sha256 line for {installer.name} in it (sha256sum format: HASH  {installer.name}); "
                   f"fetch it again: curl -fsSLo {sums} {url}{SUMS_SUFFIX}; nothing was run")


file_sha256 = sha256_file


def verify_installer(installer: Path, version: str, data: bytes | None = None) -> str:
    """The installer's sha256 when it is the one recorded beside it (``data``: its bytes as read for a copy, so the
    bytes copied are the bytes checked); BadInput naming the file and both hashes when not. Nothing is run here."""
    expected = recorded_sha256(installer, version)
    try:
        actual = hashlib.sha256(data).hexdigest() if data is not None else file_sha256(installer)
    except OSError as exc:
        raise BadInput(f"{installer}: unreadable ({exc.strerror}); nothing was run") from None
    if actual != expected:
        raise BadInput(f"{installer}: sha256 {actual} does not match {expected} recorded in "
                       f"{sums_file(installer).name}; it is not the installer NVIDIA published: fetch it again "
                       f"({NVIDIA_URL.format(version=version)}) or record the right sha256; nothing was run")
    return actual


def verify_repository_installer(repository: Path, version: str | None) -> str | None:
    """``verify_installer`` of ``version``'s installer in ``repository`` (None: no version, or no such file)."""
    if version is None:
        return None
    installer = repository / installer_name(version)
    if not installer.is_file():
        return None
    return verify_installer(installer, version)
