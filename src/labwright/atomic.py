"""Writes that never leave a partial file: write beside the target, fsync, then rename(2) over it.

The way PVE writes pmxcfs files (PVE::Tools::file_set_contents: a temp file beside the target, then rename) and the
way labwright writes every file it owns. A reader, or a process killed at any instant, sees the old content or the new,
never a mix: rename(2) is atomic within one filesystem, and the data is on disk (fsync) before the name points at it;
the directory is fsynced after the rename so the new name survives a power cut too.

``keep_previous=True`` keeps the content the write replaced as ``NAME.prev`` beside the target (itself replaced
atomically: a hard link to the old inode, renamed into place), so a user can always get back the file labwright
changed. Temporary files a killed writer left behind (``.NAME.labwright.PID.*``) are removed by the next write to
the same target once their writer is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

from labwright.textio import ascii_digits

PREVIOUS_SUFFIX = ".prev"
_TMP_MARK = ".labwright."


def previous_path(target: Path) -> Path:
    """Where ``keep_previous`` puts the replaced content of ``target``."""
    return target.with_name(target.name + PREVIOUS_SUFFIX)


def _tmp_path(target: Path) -> Path:
    return target.with_name(f".{target.name}{_TMP_MARK}{os.getpid()}.{secrets.token_hex(4)}")


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (one we may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_orphans(target: Path) -> None:
    """Remove temporaries of earlier writes to ``target`` whose writing process no longer exists (killed mid-write)."""
    prefix = f".{target.name}{_TMP_MARK}"
    try:
        names = os.listdir(target.parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(prefix):
            continue
        pid_text = name[len(prefix):].split(".", 1)[0]
        if ascii_digits(pid_text) and int(pid_text) != os.getpid() and not pid_alive(int(pid_text)):
            with contextlib.suppress(OSError):
                (target.parent / name).unlink()


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems (and /proc-like ones) refuse fsync on a directory; the rename is still atomic
    finally:
        os.close(fd)


def _keep(target: Path) -> None:
    link = _tmp_path(target)
    try:
        os.link(target, link)  # the old inode under a second name: no copy, and the old content is never torn
    except OSError:  # a filesystem without hard links (pmxcfs, some FUSE): copy it, atomically as well
        write_bytes_atomic(previous_path(target), target.read_bytes())
        return
    os.replace(link, previous_path(target))


def _stage(target: Path, data: bytes, mode: int | None) -> Path:
    """``data`` in a temporary file beside ``target``, on disk (fsync), with the permission bits the new file gets."""
    _remove_orphans(target)
    if mode is None:
        try:
            mode = target.stat().st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o644 & ~umask
    tmp = _tmp_path(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp


def write_bytes_atomic(target: Path, data: bytes, *, keep_previous: bool = False, mode: int | None = None) -> None:
    """Replace ``target`` with ``data`` atomically (see the module docstring).

    The new file keeps the permission bits of the file it replaces (``mode`` overrides; a new file gets 0o644 less the
    umask). With ``keep_previous`` the replaced content stays as ``NAME.prev``. On failure the temporary file is
    removed, ``target`` is untouched and the OSError goes up.
    """
    write_files_atomic({Path(target): data}, keep_previous=keep_previous, mode=mode)


def write_files_atomic(files: dict[Path, bytes], *, keep_previous: bool = False, mode: int | None = None) -> None:
    """Replace several files, all or none as far as a failure goes: every new content is staged and on disk before
    the first rename, so a write error (disk full, permissions) changes no file; then each is renamed over its target
    (``keep_previous`` as in ``write_bytes_atomic``). A kill between two renames leaves each file whole, old or new."""
    staged: list[tuple[Path, Path]] = []
    try:
        for target, data in files.items():
            try:
                staged.append((_stage(Path(target), data, mode), Path(target)))
            except OSError as exc:
                exc.filename = str(target)  # the file the caller named, not the temporary beside it
                raise
        for tmp, target in staged:
            if keep_previous and target.is_file():
                _keep(target)
            os.replace(tmp, target)
    except BaseException:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise
    for directory in {target.parent for _, target in staged}:
        _fsync_dir(directory)


def write_text_atomic(target: Path, text: str, *, keep_previous: bool = False, mode: int | None = None,
                      encoding: str = "utf-8") -> None:
    """Replace ``target`` with ``text`` (encoded as ``encoding``) atomically; see ``write_bytes_atomic``."""
    write_bytes_atomic(target, text.encode(encoding), keep_previous=keep_previous, mode=mode)


@contextlib.contextmanager
def once_under_lock(done: Path, lock: Path, valid: Callable[[Path], bool]) -> Iterator[bool]:
    """Work done once per cache entry by whichever of several parallel runs comes first: yields False when ``done``
    exists (already, or once the lock is ours) and ``valid(done)`` holds, else True while this run holds an exclusive
    flock on ``lock`` (an entry there that is not valid is made again: the caller replaces it). ``valid`` is not
    optional: an entry is never trusted for existing (docs/reliability.md class 26)."""
    def finished() -> bool:
        return done.exists() and valid(done)

    if finished():
        yield False
        return
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield not finished()
