"""pyinfra operations for deploys/desktop.py whose inputs only exist once the packages are in (xrdp.ini, the
browser's .desktop file): they read the guest when they run, so a first deploy plans them as changes and a
re-run finds nothing to do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pyinfra import host
from pyinfra.api import operation
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.files import File, Sha256File

from labwright.facts.desktop import XrdpGlobals
from labwright.operations.secrets import stage_dir, staged_upload
from labwright.shell import quote

_INI_KEY = re.compile(r"^[A-Za-z0-9_]+$")
_MODE = re.compile(r"^[0-7]{3,4}$")


def _sed_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("|", "\\|").replace("&", "\\&")


@operation()
def xrdp_globals(values: Mapping[str, str]):
    """
    Set keys of /etc/xrdp/xrdp.ini's ``[Globals]`` section (only there: other sections have their own ``port=``).

    + values: key -> value; a key the section lacks is added right after ``[Globals]``

    **Example:**

    .. code:: python

        desktop.xrdp_globals(name="xrdp on loopback", values={"port": "tcp://.:3389", "security_layer": "tls"})
    """
    for key, value in values.items():
        # The key goes into a sed address and the value into a sed `a`/`s` text: one line of plain words only.
        if not _INI_KEY.match(str(key)) or "\n" in str(value):
            raise OperationError(f"xrdp_globals: {key}={value!r}: a key is letters, digits and _, a value one line")
    current = host.get_fact(XrdpGlobals)
    if current is None:
        if host.state.is_executing:
            raise OperationError(f"{XrdpGlobals.PATH} does not exist: is xrdp installed?")
        current = {}
    path = quote(XrdpGlobals.PATH)
    for key, value in values.items():
        if current.get(key) == value:
            continue
        line = f"{key}={value}"
        if key in current:
            yield f"sed -i '/^\\[Globals\\]/,/^\\[/ s|^{key}=.*|{_sed_value(line)}|' {path}"
        else:
            yield f"sed -i '/^\\[Globals\\]/a {_sed_value(line)}' {path}"
    if all(current.get(key) == value for key, value in values.items()):
        host.noop(f"{XrdpGlobals.PATH} [Globals] already sets {', '.join(values)}")


@operation()
def copy_on_host(src: str, dest: str, user: str, group: str, mode: str = "644"):
    """
    Copy a file that lives on the guest (a package's .desktop launcher) to ``dest`` with this owner and mode.

    + src / dest: paths on the guest
    + user / group / mode: of ``dest``; a copy that differs, or has another owner or mode, is replaced
    """
    if not _MODE.match(mode):
        raise OperationError(f"copy_on_host: mode {mode!r} is not an octal mode such as 644")
    source_sum = host.get_fact(Sha256File, path=src)
    if source_sum is None and host.state.is_executing:
        raise OperationError(f"{src} does not exist on {host.name}: is the package that ships it installed?")
    info = host.get_fact(File, path=dest)
    same = (source_sum is not None and info and host.get_fact(Sha256File, path=dest) == source_sum
            and info.get("user") == user and info.get("group") == group
            # pyinfra's File fact says mode 0644 as 644
            and str(info.get("mode")) == mode.lstrip("0"))
    if same:
        host.noop(f"{dest} is a copy of {src}")
        return
    yield f"install -o {quote(user)} -g {quote(group)} -m {mode} {quote(src)} {quote(dest)}"


@operation()
def self_signed_certificate(cert: str, key: str, group: str, subject: str):
    """
    A TLS key and certificate made on the guest itself (each copy of a golden image gets its own key).

    + cert / key: paths; the key is ``root:GROUP`` 0640 so members of GROUP (xrdp in ssl-cert) can read it
    + subject: the certificate's subject, e.g. ``/CN=desk1``
    """
    if not subject.startswith("/") or "=" not in subject:
        raise OperationError(f"self_signed_certificate: subject {subject!r} is not openssl's /KEY=VALUE form, e.g. "
                             "/CN=desk1")
    key_info = host.get_fact(File, path=key)
    cert_info = host.get_fact(File, path=cert)
    if not key_info or not cert_info:
        yield (f"openssl req -x509 -newkey rsa:3072 -nodes -days 3650 -subj {quote(subject)} "
               f"-keyout {quote(key)} -out {quote(cert)} 2>/dev/null")
        yield f"chown root:{quote(group)} {quote(key)} && chmod 640 {quote(key)}"
        yield f"chmod 644 {quote(cert)}"
        return
    if key_info.get("group") != group or str(key_info.get("mode")) != "640":
        yield f"chown root:{quote(group)} {quote(key)} && chmod 640 {quote(key)}"
        return
    host.noop(f"{cert} and its key exist")


def password_file(user: str) -> str:
    """Where a generated password for the desktop ``user`` is kept on the guest: root's, mode 0600."""
    return f"/root/labwright-desktop-password-{user}"


@operation()
def user_password(user: str, password_hash: str | None = None):
    """
    Set the desktop ``user``'s password without it or its hash ever being on a command line.

    + user: the desktop user (it exists)
    + password_hash: a SHA-512 crypt hash (made on the control machine from ``$LABWRIGHT_DESKTOP_PASSWORD``), set
      through ``chpasswd -e`` reading it from a root-only staged file; a generated password left by an earlier run
      is then removed. None: generate one on the guest (16 letters and digits from /dev/urandom), set it through
      ``chpasswd -c SHA512`` on stdin, and keep it in :func:`password_file` (0600 root, written under umask 077 and
      moved into place whole) for the operator to read; it is never printed.

    **Example:**

    .. code:: python

        desktop.user_password(name="Desktop password", user="desk")
    """
    kept = password_file(user)
    if password_hash is not None:
        stage = stage_dir(kept)
        staged = yield from staged_upload(f"{user}:{password_hash}\n", stage)
        yield (f"chpasswd -e < {quote(staged)}; rc=$?; rm -rf {quote(stage)}; "
               f"if [ $rc -eq 0 ]; then rm -f {quote(kept)}; fi; exit $rc")
        return
    # printf is a shell builtin: the password goes from the root-only file to chpasswd's stdin, never into an argv.
    yield (f"umask 077 && d=$(mktemp -d /root/.labwright-desktop-password.XXXXXX) || exit 1; "
           f"tr -dc A-Za-z0-9 < /dev/urandom | head -c 16 > \"$d/password\" "
           f"&& [ \"$(wc -c < \"$d/password\")\" -eq 16 ] "
           f"&& {{ printf '%s:' {quote(user)}; cat \"$d/password\"; echo; }} | chpasswd -c SHA512 "
           f"&& echo >> \"$d/password\" && mv -f \"$d/password\" {quote(kept)}; rc=$?; rm -rf \"$d\"; exit $rc")
