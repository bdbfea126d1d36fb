"""The checks behind labwright.schema.fields' types, as plain functions: no pydantic here (issue 33 item 2).

Each ``check`` (usable without a model, e.g. ``port("8080") == 8080``; a module that must not load pydantic at its
import uses these) takes what the user wrote (a string from an inventory or ``--data``, a number, a bool),
returns the typed value, or raises ``ValueError`` with one line that names the value and how to fix it; the key is
added by :func:`labwright.schema.model.error_line`. A checked value checks again to itself (``check(check(x)) ==
check(x)``), so a model can be validated twice.

:mod:`labwright.schema.fields` makes each one a pydantic ``Annotated`` type.
"""

from __future__ import annotations

import ipaddress
import math
import posixpath
import re
import urllib.parse
from collections.abc import Callable
from typing import Any

from labwright.shell import path_problem
from labwright.textio import ascii_digits

#: Directories a service may never own (its data directory, venv, models, stack root): deleting, chowning or
#: filling one breaks the host. Compared after normalisation (``/etc/`` and ``/usr/./`` are ``/etc``, ``/usr``);
#: anything under /proc, /sys or /dev is refused too (kernel filesystems).
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/lost+found", "/media",
    "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp",
    "/usr", "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/local",
    "/usr/local/bin", "/usr/local/lib", "/usr/local/sbin", "/usr/local/share", "/usr/sbin", "/usr/share", "/usr/src",
    "/var", "/var/backups", "/var/cache", "/var/lib", "/var/local", "/var/lock", "/var/log", "/var/mail", "/var/opt",
    "/var/run", "/var/spool", "/var/tmp",
})
KERNEL_DIRS = ("/proc", "/sys", "/dev")

#: A Linux user or group name as useradd/groupadd accept it by default (shadow-utils NAME_REGEX, 32 characters at
#: most) without the trailing ``$`` of machine accounts: the one pattern every deploy checks a user name with.
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
#: One DNS label (RFC 1123 section 2.1: letters, digits, hyphens, not at either end, 63 characters at most).
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
#: A longer wait or lifetime than a year is a typo (a unit missing, digits too many).
MAX_DURATION = 366 * 86400
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def control_character(text: str) -> str | None:
    """The first control character in ``text`` (C0, DEL or C1), or None: the one definition every check of "one
    line of text" uses."""
    found = _CONTROL.search(text)
    return found.group() if found else None


def _show(value: Any) -> str:
    """``value`` as the message shows it: its repr, cut to 80 characters (a message stays one readable line)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _text(value: Any, what: str) -> str:
    """A string value without control characters, stripped of spaces; a number is taken as its digits, anything
    else (a list, a bool) refused.
    Only spaces: str.strip() also takes away control characters at the ends (\x0b, \x1c-\x1f, \x85), which
    then passed every check unseen (sweep at 6d041d3: ``tabbyapi_wheelhouse=\x1c`` read as "not set")."""
    if isinstance(value, str):
        found = _CONTROL.search(value)
        if found:  # no text a check reads holds one: a path, a name, a URL, a version, a key (one definition)
            raise ValueError(f"{_show(value)} holds the control character {found.group()!r}; give {what}")
        return value.strip(" ")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"{_show(value)} is not {what}")


def _digits(value: str, pattern: str, what: str) -> int | str:
    """``value``'s number when it is ASCII digits matching ``pattern`` (spaces around allowed); else ``value`` itself,
    for the caller's own refusal. Never ``int(value)`` directly: it also takes other whitespace at the ends
    (``"\\x0b1"`` read as 1, a sweep at 1a05899), other scripts' digits (``"٨٠٨٠"`` as 8080) and ``"1_0"``."""
    text = _text(value, what)
    return int(text) if re.fullmatch(pattern, text) else value


def host_problem(text: str, brackets: bool = False) -> str | None:
    """Why ``text`` is neither an IP address nor an RFC 1123 host name (None: it is one). ``999.1.1.1`` looks
    like an IPv4 address but is not one: a name whose last label is all digits is refused. ``brackets``: an IPv6
    address may also come in brackets, as in a URL or a Caddy site address (``[::1]``); only a whole pair around an
    IPv6 address (``[::1`` and ``[10.0.0.1]`` are refused). Every host or address labwright reads is checked here
    (deploy data, inventories, CLI options), never by a copy of its own (sweep at 6d041d3: the gateway's copy took
    ``[::1``)."""
    if not isinstance(text, str):
        return f"{_show(text)} is not an IP address or a host name"
    if brackets and text.startswith("[") and text.endswith("]"):
        try:
            if ipaddress.ip_address(text[1:-1]).version == 6:
                return None
        except ValueError:
            pass
        return f"{_show(text)} is not an IPv6 address in brackets (e.g. [::1])"
    try:
        ipaddress.ip_address(text)
        return None
    except ValueError:
        pass
    name = text[:-1] if text.endswith(".") else text
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        return (f"{_show(text)} is not an IP address or a host name (letters, digits, hyphens and dots, "
                "e.g. 127.0.0.1, ::1 or gpu-01.lan)")
    if ascii_digits(labels[-1]):
        return f"{_show(text)} is not a valid IP address (each IPv4 part is 0-255, e.g. 10.99.0.10)"
    return None


def url(value: Any, schemes: tuple[str, ...] = ("http", "https"), example: str = "e.g. http://127.0.0.1:8080/v1",
        user_schemes: tuple[str, ...] = (),
        credentials: str = "give the key through the environment (e.g. --api-key-env) and the URL without it") -> str:
    """A URL with one of ``schemes``, a host (an IP address, IPv6 in brackets, or a host name) and, if given, a port
    1-65535, parsed by urllib.parse and ipaddress: ``http://[::1/v1`` and ``http://h:0`` are refused. A user name
    (never a password) only for ``user_schemes`` (``ssh://git@host/...``); ``credentials``: where they go instead."""
    text = _text(value, f"a URL ({example})")
    if _CONTROL.search(text) or re.search(r"\s", text):
        raise ValueError(f"{_show(text)} is not a URL: it holds spaces or control characters ({example})")
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError as error:
        why = str(error)
        if "Port" in why:
            why = "the port is not a number 1-65535"
        raise ValueError(f"{_show(text)} is not a URL: {why[0].lower()}{why[1:]} ({example})") from None
    if "@" in parts.netloc and not (parts.scheme.lower() in user_schemes and parts.password is None):
        # never echoed (it may hold a password), never sent: the clients here take keys from the environment
        shown = f"{parts.scheme}://***@{parts.netloc.rpartition('@')[2]}{parts.path}"
        raise ValueError(f"{_show(shown)} holds a user name or password: credentials never go in a URL (an "
                         f"inventory or a shell history keeps them); {credentials}")
    if parts.scheme.lower() not in schemes:
        raise ValueError(f"{_show(text)} is not a {' or '.join(schemes)} URL ({example})")
    host = parts.hostname or ""
    if not host:
        raise ValueError(f"{_show(text)} is not a URL: it names no host ({example})")
    if "[" in parts.netloc:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{_show(text)} is not a URL: {host!r} in brackets is not an IPv6 address "
                             f"({example})") from None
    else:
        problem = host_problem(host)
        if problem is not None:
            raise ValueError(f"{_show(text)} is not a URL: its host {problem}")
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"{_show(text)} is not a URL: port {port} is not 1-65535 ({example})")
    return text


def git_url(value: Any) -> str:
    """Where git fetches a repository from: an https, http, git, ssh or file URL, or scp-like ``user@host:path``
    (git-clone(1) "GIT URLS"); the host checked as every host is (:func:`host_problem`). Refused: credentials (a
    password or token in the URL: an inventory keeps them; give the guest a credential helper or an SSH key), a
    fragment (git ignores it: a ``#ref`` was meant as ``tabbyapi_ref``), an option (``--upload-pack=...``) and git's
    remote helpers (``ext::``)."""
    example = "e.g. https://github.com/theroyallab/tabbyAPI.git"
    text = _text(value, f"a git URL ({example})")
    if _CONTROL.search(text) or re.search(r"[\s'\"]", text):
        raise ValueError(f"{_show(text)} is not a git URL: it holds spaces, quotes or control characters ({example})")
    if text.startswith("-") or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*::", text):
        raise ValueError(f"{_show(text)} is not a git URL: options and git's remote helpers (ext::) are refused "
                         f"({example})")
    if "#" in text:
        raise ValueError(f"{_show(text)} is not a git URL: git ignores a #fragment; name the tag, branch or commit "
                         f"with the ref key instead ({example})")
    scp = re.fullmatch(r"(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>[^/:@]+):(?P<path>(?!//).+)", text)
    if scp and "://" not in text:
        problem = host_problem(scp["host"])
        if problem is not None:
            raise ValueError(f"{_show(text)} is not a git URL: its host {problem}")
        return text
    if text.startswith(("file://", "/")):  # a repository on the guest's own disk
        if not text.startswith(("file:///", "/")) or text.startswith("//") or ".." in text.split("/"):
            raise ValueError(f"{_show(text)} is not a git URL: a file URL names an absolute path (file:///srv/git/"
                             "tabbyAPI.git)")
        return text
    return url(text, ("https", "http", "git", "ssh"), example, user_schemes=("ssh",),
               credentials="give the guest a git credential helper or an SSH key (ssh://git@host/...), and the URL "
                           "without them")


def listen_address(value: Any) -> str:
    """An address a service listens on: an IP address (``0.0.0.0``, ``::``, ``127.0.0.1``) or a host name."""
    text = _text(value, "an IP address or host name (e.g. 127.0.0.1 or 0.0.0.0)")
    problem = host_problem(text)
    if problem is not None:
        raise ValueError(problem)
    return text


def port(value: Any) -> int:
    """A TCP/UDP port 1-65535, given as a number or its digits (``"8080"``); a bool or ``8080.5`` is refused."""
    if isinstance(value, str):
        value = _digits(value, r"[0-9]{1,6}", "a port number (a whole number 1-65535, e.g. 8080)")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{_show(value)} is not a port number (a whole number 1-65535, e.g. 8080)")
    if not 1 <= value <= 65535:
        raise ValueError(f"{value} is out of range (a port is 1-65535)")
    return value


def abs_path(value: Any) -> str:
    """An absolute path without shell characters, quotes, spaces or ``..``, normalised (``/srv//x/`` is
    ``/srv/x``), so one directory has one spelling."""
    text = _text(value, "an absolute path (e.g. /srv/labwright)")
    problem = path_problem(text, absolute=True)
    if problem is not None:
        raise ValueError(problem)
    if ".." in text.split("/"):
        raise ValueError(f"{_show(text)} holds a '..' part; give the directory itself (e.g. /srv/labwright)")
    normal = posixpath.normpath(text)
    return "/" + normal.lstrip("/")


def managed_dir(value: Any) -> str:
    """A directory a service will own (create, chown, fill, maybe delete): an :func:`abs_path` that is not a system
    directory such as /, /etc, /usr, /var or /home, nor under /proc, /sys or /dev."""
    path = abs_path(value)
    if path in SYSTEM_DIRS or any(path.startswith(f"{root}/") for root in KERNEL_DIRS):
        raise ValueError(f"{_show(path)} is a system directory; give a directory the service can own, e.g. "
                         "/srv/NAME or /opt/NAME")
    return path


def key_file(value: Any) -> str:
    """A secret file a deploy makes and owns with its directory (``mkdir -p DIR; chown root:USER DIR; chmod 750``,
    then the file 0640): an :func:`abs_path` in a directory of its own that the service can own
    (:func:`managed_dir`), never /etc/shadow or a file directly in /."""
    path = abs_path(value)
    parent = posixpath.dirname(path)
    if parent == "/" or str(value).strip(" ").endswith("/"):
        raise ValueError(f"{_show(path)} must be a file in a directory of its own, e.g. /etc/NAME/api-key (the "
                         "directory is made root:<user> 0750)")
    try:
        managed_dir(parent)
    except ValueError as error:
        raise ValueError(f"{_show(path)}: its directory {error}") from None
    return path


def user_name(value: Any) -> str:
    """A Linux user or group name (:data:`USER_NAME`)."""
    text = _text(value, "a user name")
    if not USER_NAME.match(text):
        raise ValueError(f"{_show(text)} is not a user name: 1-32 of a-z 0-9 _ -, starting with a letter or _ "
                         "(e.g. labwright)")
    return text


#: Users and units the OS already has, which a deploy would take over (rewrite the unit, restart it as the engine;
#: add the account to groups, give it the API key): Debian's base-passwd users (base-passwd 3.6 README, the static
#: ids 0-99 and 65534), the accounts and units of a Debian/Ubuntu/Proxmox base system, and any ``systemd-*``.
SYSTEM_NAMES = frozenset({
    "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy", "www-data",
    "backup", "list", "irc", "gnats", "nobody", "nogroup", "_apt", "messagebus", "sshd", "ssh", "cron", "dbus",
    "networking", "getty", "rsyslog", "udev", "polkit", "polkitd", "tss", "lxd", "incus", "docker", "containerd",
    "pveproxy", "pvedaemon", "pvestatd", "pve-cluster", "pve-firewall", "corosync", "apparmor", "ufw", "chrony",
    "ntp", "postfix", "unattended-upgrades", "dnsmasq", "avahi", "avahi-daemon", "lightdm", "gdm", "xrdp",
    "xrdp-sesman", "login", "sudo", "users", "adm", "tty", "disk", "kmem", "dialout", "cdrom", "floppy", "tape",
    "audio", "video", "render", "plugdev", "staff", "shadow", "utmp", "operator", "src", "input", "kvm", "netdev",
})


def service_user(value: Any) -> str:
    """A user (or unit) name a service runs as: :func:`user_name`, never root nor a user or unit the OS already
    has (:data:`SYSTEM_NAMES`): a deploy writes its unit, adds the user to groups and gives it the API key."""
    name = user_name(value)
    if name == "root":
        raise ValueError(f"{name!r} is not a valid name (lowercase letters, digits, _ and -; not root)")
    if name in SYSTEM_NAMES or name.startswith("systemd-"):
        raise ValueError(f"{name!r} is a user or service the system already has, which the deploy would take over; "
                         "give a name of the service's own (e.g. llama-server)")
    return name


#: Directories a deploy may install a program into although they are system directories (it writes only its own
#: file there, by name); every other parent must be a directory the service can own (:func:`managed_dir`).
PROGRAM_DIRS = frozenset({"/usr/local/bin", "/usr/local/sbin"})


def program_path(value: Any) -> str:
    """The path a deploy installs its own program at (moved over what is there): an :func:`abs_path` in
    /usr/local/bin (or sbin) or in a directory the service can own, never a system directory's program
    (/usr/bin/python3) nor a directory."""
    path = abs_path(value)
    parent = posixpath.dirname(path)
    if path in SYSTEM_DIRS or (parent not in PROGRAM_DIRS and _system_dir(parent)):
        raise ValueError(f"{_show(path)} is in (or is) a system directory, whose programs belong to the system; "
                         "install at /usr/local/bin/NAME or under a directory of the service's own (/opt/NAME)")
    return path


def _system_dir(path: str) -> bool:
    return path in SYSTEM_DIRS or any(path == root or path.startswith(f"{root}/") for root in KERNEL_DIRS) or \
        any(path.startswith(f"{root}/") for root in ("/etc", "/boot", "/usr/bin", "/usr/sbin", "/bin", "/sbin",
                                                      "/usr/lib", "/lib"))


def size(value: Any) -> int:
    """Bytes, from a number of bytes or a size such as ``2.4GiB``, ``512MiB`` (labwright.tuning.units.parse_size:
    every unit binary, 1 PiB at most)."""
    from labwright.errors import BadInput
    from labwright.tuning.units import MAX_SIZE, parse_size

    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= MAX_SIZE:
            raise ValueError(f"{value} is not a size from 0 bytes to 1 PiB")
        return value
    text = _text(value, "a size (e.g. 2.4GiB, 512MiB or a number of bytes)")
    try:
        return parse_size(text, "")
    except BadInput as error:
        raise ValueError(str(error).strip()) from None


def duration(value: Any) -> float:
    """Seconds, from a number of seconds or a duration such as ``30s``, ``5m``, ``1h30m``, ``250ms``, ``2d`` (366
    days at most)."""
    example = "e.g. 30s, 5m, 1h30m or a number of seconds"
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = _text(value, f"a duration ({example})").lower().replace(" ", "")
        if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", text):
            seconds = float(text)
        elif text and _DURATION_PART.sub("", text) == "":
            seconds = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))
        else:
            raise ValueError(f"{_show(value)} is not a duration ({example})")
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_DURATION:
        raise ValueError(f"{_show(value)} is not a duration from 0 to 366 days ({example})")
    return seconds


def version(value: Any) -> str:
    """A version packaging (PEP 440) reads, e.g. ``1.2.3``, ``2.0rc1``; kept as written. A float (``1.10`` read by
    YAML as 1.1) is refused: quote it."""
    from packaging.version import InvalidVersion, Version

    if isinstance(value, float):
        raise ValueError(f"{_show(value)} is a number, not a version: quote it (\"1.10\" is not 1.1)")
    text = _text(value, "a version (e.g. 1.2.3)")
    try:
        Version(text)
    except InvalidVersion:
        raise ValueError(f"{_show(text)} is not a version (e.g. 1.2.3 or 2.0rc1)") from None
    return text


DEBIAN_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+")


def debian_packages(value: Any) -> list[str]:
    """Debian package names, from a list or a comma/space separated string (``--data KEY=libgomp1,curl``): as
    Debian policy 5.6.1 spells them (lower-case letters, digits, ``+ - .``, two characters or more, starting with a
    letter or digit), 200 at most; an empty list is no packages. The one reading of every ``*_packages`` key: five
    hand-written copies had drifted, and three deploys did not check theirs at all (sweep at 6d041d3: a string was
    taken letter by letter as package names)."""
    example = "e.g. libgomp1,curl"
    if isinstance(value, str) and control_character(value.replace(" ", "")):
        raise ValueError(f"{_show(value)} holds a control character; give package names separated by commas or "
                         f"spaces ({example})")
    names = [word for word in re.split(r"[, ]+", value) if word] if isinstance(value, str) else value
    if not isinstance(names, list | tuple):
        raise ValueError(f"{_show(value)} is not a list of Debian package names ({example})")
    if len(names) > 200:
        raise ValueError(f"{len(names)} packages: more than 200 is no package list ({example})")
    for name in names:
        if not isinstance(name, str) or not DEBIAN_PACKAGE.fullmatch(name):
            raise ValueError(f"{_show(name)} is not a Debian package name (lower-case letters, digits, + - ., at "
                             f"least two characters) ({example})")
    return list(names)


def package_name(value: Any) -> str:
    """A Python package name as PEP 508 (packaging) reads it: letters, digits, ``._-``, alphanumeric at both ends;
    no version, extras or markers."""
    from packaging.requirements import InvalidRequirement, Requirement

    text = _text(value, "a package name (e.g. litellm)")
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        requirement = None
    if requirement is None or requirement.name != text:
        raise ValueError(f"{_show(text)} is not a package name: letters, digits, . _ -, starting and ending with a "
                         "letter or digit (e.g. open-webui); no version or extras")
    return text


def secret(value: Any) -> str:
    """A password, token or API key: any text without control characters (a line break would end the line of the
    file or unit it goes into). Kept as written (not stripped), never shown in a message."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError(f"a {type(value).__name__} is not a secret: give it as text")
    found = _CONTROL.search(value)
    if found:
        raise ValueError(f"the secret holds the control character {found.group()!r} (a line break?); give it on one "
                         "line")
    return value


def strict_bool(value: Any) -> bool:
    """true or false, as YAML, TOML, JSON and ``--data`` read them: the string ``"false"`` (or ``yes``, 0, 1) is
    refused, never read as true."""
    if isinstance(value, bool):
        return value
    raise ValueError(f"{_show(value)} is not true or false: write true or false without quotes")


def whole(low: int | None = None, high: int | None = None) -> Callable[[Any], int]:
    """A check for a whole number from ``low`` to ``high`` (either open), given as a number or its digits (``"12"``,
    ``"-1"``); a bool, ``1.5`` or ``"1e3"`` is refused: ``Annotated[int, BeforeValidator(whole(1))]``."""

    def check(value: Any) -> int:
        if isinstance(value, str):
            value = _digits(value, r"[-+]?[0-9]{1,30}", "a whole number")
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{_show(value)} is not a whole number")
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(f"{value} is out of range ({'' if low is None else low}..{'' if high is None else high})")
        return value

    return check


def or_empty(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``check``, but ``""`` (or None: the key not set) stays ``""``: a key whose empty value means "none"."""

    def maybe(value: Any) -> Any:
        if value is None or (isinstance(value, str) and not value.strip(" ")):  # spaces only, as _text
            return ""
        return check(value)

    return maybe


def one_of(*choices: str) -> Callable[[Any], str]:
    """A check for one of ``choices`` (compared without case or surrounding spaces)."""

    def check(value: Any) -> str:
        text = _text(value, f"one of {', '.join(choices)}").lower() if not isinstance(value, bool) else repr(value)
        for choice in choices:
            if text == choice.lower():
                return choice
        raise ValueError(f"{_show(value)} is not one of {', '.join(choices)}")

    return check


#: What a deploy's on/off data key reads as true or false: inventories and ``--data`` have long written yes/no, on/off
#: and 1/0 for them (a schema that must not read "false" loosely uses ``strict_bool``).
FLAG_TRUE, FLAG_FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def flag(value: Any) -> bool:
    """An on/off data key: a bool, or true/false, yes/no, on/off, 1/0 (any case); anything else refused."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str | int):
        text = _text(value, "a boolean (use true or false)").lower()
        if text in FLAG_TRUE or text in FLAG_FALSE:
            return text in FLAG_TRUE
    raise ValueError(f"{_show(value)} is not a boolean (use true or false)")


def line(value: Any) -> str:
    """One line of text (a name, a flag, a version spec), stripped: no control characters."""
    text = _text(value, "text")
    found = _CONTROL.search(text)
    if found:
        raise ValueError(f"{_show(text)} holds the control character {found.group()!r}; give one line")
    return text
