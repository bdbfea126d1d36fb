"""Every environment variable labwright reads, declared once with its type, and the one function that reads them
(issue 33 item 1: env vars typed at the boundary).

::

    from labwright.schema import env

    if env.read("LABWRIGHT_DEBUG"):          # True only for 1/true/yes; 0/false/no/unset: False
        ...
    secret = env.read("PROXMOX_TOKEN_SECRET")  # None when unset; a line break in it: BadInput (exit 2)

:func:`check_environment` runs once at the CLI's entry (``labwright.cli._run``), before a command is parsed, so
junk in a variable is one line naming the variable and the fix, exit 2, before any daemon or API is contacted.

Kinds: ``bool`` (1/0/true/false/yes/no, any case; empty is unset), ``secret`` (any text without control
characters, never shown), ``url`` (:func:`labwright.schema.fields.url`), ``path`` (one line, no control
characters; ``~`` allowed, spaces allowed: a home directory may hold them), ``seconds`` (a number 0-86400),
``choice``, ``line`` (one line of text). A variable named by the user (``bench --api-key-env VAR``, a LiteLLM
cloud model's key) is read with its kind given: ``read(name, kind="secret")``.

Only ``url`` imports pydantic (through labwright.schema.fields), and only when such a variable is set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from labwright.errors import BadInput

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TRUE = frozenset({"1", "true", "yes"})
_FALSE = frozenset({"0", "false", "no"})


@dataclass(frozen=True)
class Var:
    """One environment variable: its ``kind`` (see the module docstring), what it is for, ``choices`` for a
    ``choice``, ``strip``: surrounding white space (a trailing line break of ``$(cat file)``) dropped first."""

    name: str
    kind: str
    meaning: str
    choices: tuple[str, ...] = ()
    strip: bool = False


#: Every variable labwright's CLI process reads (``grep -rn "os.environ" src/labwright``), by name. Variables of
#: the in-guest verify suites (``LABWRIGHT_<DEPLOY>_<KEY>``, set by ``labwright verify`` itself from the checked
#: host data) and those only passed through to a child (PATH, PIP_*) are not listed.
VARS: dict[str, Var] = {var.name: var for var in (
    Var("LABWRIGHT_DEBUG", "bool", "print the traceback of an error too"),
    Var("LABWRIGHT_PROGRESS", "choice", "how long steps report progress", ("off", "lines", "bar", "auto")),
    Var("LABWRIGHT_PROGRESS_INTERVAL", "seconds", "seconds between plain progress lines"),
    Var("LABWRIGHT_HOME", "path", "labwright's data directory (keys)"),
    Var("LABWRIGHT_CACHE", "path", "labwright's cache directory"),
    Var("XDG_CACHE_HOME", "path", "the user's cache directory"),
    Var("XDG_DATA_HOME", "path", "the user's data directory"),
    Var("LABWRIGHT_INVENTORY", "path", "the default inventory"),
    Var("LABWRIGHT_CLUSTER_INVENTORY", "path", "the default cluster inventory"),
    Var("LABWRIGHT_GUESTS_INVENTORY", "path", "the inventory the guest deploy reads its guests from"),
    Var("LABWRIGHT_MATRIX_DIR", "path", "the wheels matrix directory"),
    Var("LABWRIGHT_VERIFY_REPORT", "path", "where verify writes its JSON report"),
    Var("LABWRIGHT_DEBIAN_MIRROR", "url", "the Debian mirror lab images are built from"),
    Var("LABWRIGHT_GUEST_LOCK", "line", "the run lock a parent labwright already holds (set by labwright)"),
    Var("LABWRIGHT_FAULT_AT", "line", "a test hook: the stack switch step to fail at"),
    Var("LABWRIGHT_TTS_API_KEY", "secret", "the API key bench tts sends"),
    Var("LABWRIGHT_DESKTOP_PASSWORD", "secret", "the desktop user's password"),
    Var("LXD_SOCKET", "path", "the LXD daemon's unix socket (before LXD_DIR)"),
    Var("INCUS_SOCKET", "path", "the Incus daemon's unix socket (before INCUS_DIR)"),
    Var("LXD_SOCKET", "path", "the LXD daemon's unix socket"),
    Var("INCUS_SOCKET", "path", "the Incus daemon's unix socket"),
    Var("LXD_DIR", "path", "the LXD daemon's directory (its unix.socket)"),
    Var("INCUS_DIR", "path", "the Incus daemon's directory (its unix.socket)"),
    Var("LXD_CONF", "path", "the lxc client's configuration directory"),
    Var("INCUS_CONF", "path", "the incus client's configuration directory"),
    Var("PROXMOX_TOKEN_ID", "line", "the Proxmox API token id, USER@REALM!NAME"),
    Var("PROXMOX_TOKEN_SECRET", "secret", "the Proxmox API token's secret"),
    Var("PROXMOX_USER", "line", "the Proxmox user, USER@REALM"),
    Var("PROXMOX_PASSWORD", "secret", "the Proxmox user's password"),
    Var("PROXMOX_CA_FILE", "path", "the Proxmox cluster's CA certificate"),
    Var("HF_TOKEN", "secret", "the Hugging Face token", strip=True),
    Var("HUGGING_FACE_HUB_TOKEN", "secret", "the Hugging Face token (older name)", strip=True),
    Var("HF_HOME", "path", "huggingface_hub's directory"),
    Var("HF_TOKEN_PATH", "path", "the Hugging Face token file"),
    Var("HF_ENDPOINT", "url", "the Hugging Face endpoint"),
    Var("GITHUB_TOKEN", "secret", "the GitHub token matrix refresh sends", strip=True),
)}


def _show(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _refuse(name: str, shown: str, why: str, fix: str) -> BadInput:
    return BadInput(f"environment variable {name}{shown} {why}; {fix} (nothing was contacted)")


def _typed(var: Var, raw: str) -> Any:
    """``raw`` as ``var`` reads it (None: unset), or BadInput naming the variable and the fix."""
    name, kind = var.name, var.kind
    # Never str.strip(): it also takes \x0b, \x0c, \x1c-\x1f and \x85 at the ends, which then passed the control-
    # character check below unseen ("\x0b1" read as 1). A ``strip`` variable drops what reading a file leaves.
    loose = kind in ("bool", "choice", "seconds", "url")
    value = raw.strip(" \t\r\n") if var.strip else raw.strip(" ") if loose else raw
    if not value:
        return None
    shown = "" if kind == "secret" else f"={_show(raw)}"
    if kind == "secret":
        found = _CONTROL.search(value)
        if found:
            raise _refuse(name, shown, f"holds the control character {found.group()!r} (a line break?)",
                          f"export it on one line, e.g. export {name}=\"$(tr -d '\\n' < FILE)\"")
        return value
    found = _CONTROL.search(value)
    if found:
        raise _refuse(name, shown, f"holds the control character {found.group()!r}", f"export {name} on one line")
    if kind == "bool":
        word = value.lower()
        if word in _TRUE | _FALSE:
            return word in _TRUE
        raise _refuse(name, shown, "is not a yes/no value", f"set {name}=1 (on) or {name}=0 (off), or unset it")
    if kind == "choice":
        if value.lower() in var.choices:
            return value.lower()
        raise _refuse(name, shown, f"is not one of {', '.join(var.choices)}", f"set {name}={var.choices[0]}, or "
                      "unset it")
    if kind == "seconds":
        try:  # ASCII digits only: float() also reads "1_0", other scripts' digits and "inf"
            seconds = float(value) if re.fullmatch(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+", value) else -1.0
        except ValueError:
            seconds = -1.0
        if not 0 <= seconds <= 86400:  # also nan
            raise _refuse(name, shown, "is not a number of seconds 0-86400", f"set e.g. {name}=10, or unset it")
        return seconds
    if kind == "url":
        from labwright.schema.fields import url

        try:
            return url(value)
        except ValueError as error:
            why = str(error)
            why = why[len(repr(value)) + 1:] if why.startswith(f"{value!r} ") else why
            raise _refuse(name, shown, why, f"fix {name} or unset it") from None
    return value  # path, line: one line of text


def read(name: str, environ: Mapping[str, str] | None = None, kind: str | None = None) -> Any:
    """The environment variable ``name`` typed as :data:`VARS` declares it (None: unset or empty); ``kind`` for a
    variable the user named (``--api-key-env``). BadInput (exit 2) naming the variable and the fix."""
    var = VARS.get(name)
    if var is None or (kind is not None and kind != var.kind):
        if kind is None:
            raise KeyError(f"{name} is not declared in labwright.schema.env.VARS")
        if not _NAME.fullmatch(name):   # a variable the user named: a name export accepts (POSIX: portable names)
            raise BadInput(f"{name[:60]!r} is not an environment variable name (letters, digits and _, not "
                           "starting with a digit, e.g. LLAMA_API_KEY)")
        var = Var(name, kind, "")
    raw = (os.environ if environ is None else environ).get(name)
    return None if raw is None else _typed(var, raw)


def debug(environ: Mapping[str, str] | None = None) -> bool:
    """``LABWRIGHT_DEBUG`` on (1/true/yes)? Junk reads as off here: this is asked while an error is reported."""
    try:
        return bool(read("LABWRIGHT_DEBUG", environ))
    except BadInput:
        return False


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Every declared variable that is set, checked: the first bad one as BadInput (exit 2)."""
    env = os.environ if environ is None else environ
    for name in VARS:
        if name in env:
            read(name, env)
