"""Files that hold a secret: never shown by ``pyinfra --diff``, never world-readable for a moment.

pyinfra's ``files.put`` prints the old and new contents of the file under ``--diff`` (it even reads the file on the
host to do so) and has no option to stop it; and it writes a new file with the connection's default mode before its
``chmod``. :func:`secret_file` writes the content through a private staging directory instead (made under umask
077, mode 0700, next to the destination so the final ``mv`` is one rename on one filesystem), sets owner and mode
there, then moves it into place whole. Under ``--diff`` it says only that the file would change. Whether it changes
is decided by the file's sha1 on the host (``Sha1File``), so the content is never read back.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Generator
from io import StringIO

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, operation
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.files import Directory, File, Sha1File
from pyinfra.operations import files

from labwright.shell import quote


def stage_dir(dest: str) -> str:
    """The private directory a secret for ``dest`` is staged in: beside it, a dot-name no service reads."""
    return posixpath.join(posixpath.dirname(dest) or "/", f".{posixpath.basename(dest)}.labwright-secret")


def staged_upload(content: str, stage: str, name: str = "new") -> Generator[object, None, str]:
    """Commands that (re)make ``stage`` as a root-only 0700 directory under umask 077 and upload ``content`` into it;
    returns the staged file's path. The content goes through the connector's file transfer, never a command line."""
    staged = posixpath.join(stage, name)
    yield f"umask 077 && rm -rf {quote(stage)} && mkdir -m 700 {quote(stage)}"
    yield FileUploadCommand(StringIO(content), staged, remote_temp_filename=posixpath.join(stage, f".{name}.upload"))
    return staged


@operation()
def secret_file(content: str, dest: str, user: str = "root", group: str = "root", mode: str = "600"):
    """
    Write ``content`` at ``dest`` (owner ``user:group``, ``mode``) without ever showing it.

    + content: the file's text (a secret: not printed by ``--diff``, not put on a command line)
    + dest: the file's path on the host; its directory must exist
    + user / group / mode: owner and mode of the file (default root:root 0600)

    A file whose sha1 on the host is the content's is left alone (only its owner and mode are kept); otherwise the
    new content replaces it whole (a reader sees the old file or the new one, and no one else ever sees either).
    """
    current = host.get_fact(File, path=dest)
    if current and host.get_fact(Sha1File, path=dest) == hashlib.sha1(content.encode()).hexdigest():
        yield from files.file._inner(path=dest, user=user, group=group, mode=mode)
        return
    if state.config.DIFF:
        host.log(f"Will {'modify' if current else 'create'} {dest} (it holds a secret: contents not shown)",
                 logger.info)
    stage = stage_dir(dest)
    staged = yield from staged_upload(content, stage)
    yield (f"chown {quote(user)}:{quote(group)} {quote(staged)} && chmod {quote(mode)} {quote(staged)} "
           f"&& mv -f {quote(staged)} {quote(dest)} && rmdir {quote(stage)}")


# The key an engine answers to, made on the host: 32 random bytes, URL-safe (no quote, space or comma, so it is
# one line of llama-server's --api-key-file and one value of an env file).
KEY_SCRIPT = "import secrets; print('lw-' + secrets.token_urlsafe(32))"


@operation()
def engine_key(path: str, group: str):
    """
    An engine's API key, generated ON THE HOST with Python's ``secrets`` the first time and kept: the key alone on
    one line of ``path`` (0640 root:GROUP, in its own directory, 0750 root:GROUP). It never passes through the
    control machine, a command line or pyinfra's output; the service (running as GROUP's user) reads the file.

    + path: the key file (absolute, in a directory of its own)
    + group: the service's group, the one that may read it
    """
    if not posixpath.isabs(path) or not group.strip() or posixpath.dirname(path) in ("", "/"):
        raise OperationError(f"engine_key: path={path!r} must be absolute in a directory of its own and "
                             f"group={group!r} a group name")
    directory = posixpath.dirname(path)
    info = host.get_fact(File, path=path)
    there = host.get_fact(Directory, path=directory)
    if (info and info.get("mode") == 640 and info.get("user") == "root" and info.get("group") == group and there
            and there.get("mode") == 750 and there.get("user") == "root" and there.get("group") == group):
        host.noop(f"{path} exists (key kept)")
        return
    p, d, new = quote(path), quote(directory), quote(path + ".new")
    yield (f"umask 077; mkdir -p {d}; chown root:{quote(group)} {d}; chmod 750 {d}; "
           f"[ -s {p} ] || {{ python3 -c {quote(KEY_SCRIPT)} > {new} && mv -f {new} {p}; }}; "
           f"chown root:{quote(group)} {p}; chmod 640 {p}")
