"""labwright.deploys.base's host data as pure logic: defaults, one-line refusals, the rendered files.

Reads a mapping (``host.data.dict()`` in the deploy, a dict in tests) and the control machine's public key file,
never a target host. Keys (documented in docs/base.md): admin_user, admin_ssh_public_key_file, timezone, locale,
unattended_upgrades, sshd_permit_root_login, sshd_extra_config, admin_sudo_nopasswd. A refusal names the key,
without a prefix (``timezone: ...``).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any

from pyinfra.api.exceptions import DeployError

from labwright import paths
from labwright.deploy_data import jinja
from labwright.lab.keys import lab_key_path
from labwright.schema import checks
from labwright.schema.checks import control_character, service_user
from labwright.shell import quote

if TYPE_CHECKING:
    from labwright.schema.model import Schema

#: sshd keeps the FIRST value it reads for an option (OpenSSH servconf.c, openssh-portable 0ef0f5a83,
#: ``parse_multistate`` L1279-1280: ``if (*activep && *intptr == -1) *intptr = value;``; sshd_config(5): "for each
#: keyword, the first obtained value will be used"), and Debian's sshd_config includes sshd_config.d/*.conf (in
#: glob order) at its top. So the drop-in is named to be read first: ``00-`` sorts before cloud-init's
#: ``50-cloud-init.conf`` (which may set ``PasswordAuthentication yes``) and every other ``NN-`` file but another
#: ``00-``; the effective values are checked with ``sshd -T`` after every change (``sshd_effective_check``).
SSHD_DROPIN = "/etc/ssh/sshd_config.d/00-labwright.conf"
#: Where labwright put the drop-in before: removed, so one file holds its settings.
SSHD_DROPIN_OLD = "/etc/ssh/sshd_config.d/50-labwright.conf"
#: ``sshd_permit_root_login`` values: ``no`` (default), or root's key logins kept on purpose for a host labwright
#: (or you) reach as root over SSH. ``without-password`` is OpenSSH's old name for ``prohibit-password``
#: (servconf.c ``multistate_permitrootlogin`` L1063-1069); ``yes`` (passwords) is refused.
PERMIT_ROOT_LOGIN = ("no", "prohibit-password", "forced-commands-only")
AUTO_UPGRADES = "/etc/apt/apt.conf.d/20auto-upgrades"
BASE_PACKAGES = ["openssh-server", "sudo", "locales", "tzdata"]

DEFAULTS: dict[str, Any] = {
    "admin_user": "labadmin",
    # Read lazily: lab_key_path() creates labwright's data directory, which only matters when used.
    "admin_ssh_public_key_file": None,
    "timezone": "Etc/UTC",
    "locale": "en_US.UTF-8",
    # The distribution's own default (Debian's unattended-upgrades with 20auto-upgrades "1"): security updates stay
    # on unless the host data turns them off on purpose (docs/security.md).
    "unattended_upgrades": True,
    "sshd_permit_root_login": "no",
    # NOPASSWD for the admin: deploys run through `sudo -n sh -c ...` (pyinfra --sudo); false asks for the password
    "admin_sudo_nopasswd": True,
    "sshd_extra_config": [],
}

# trim_blocks keeps {% %} lines out of the output, so the rendered files carry no stray blank lines.
JINJA = jinja(paths.templates_dir("base"))

TIMEZONE = re.compile(r"^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$")
LOCALE = re.compile(r"^[A-Za-z0-9_.@-]+$")
PUBLIC_KEY = re.compile(r"(?a)^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp\d+|sk-[a-z0-9-]+@openssh\.com)"
                        r"\s+[A-Za-z0-9+/=]+")


def fail(key: str, message: str) -> DeployError:
    """One-line error naming the host data key; pyinfra prints DeployError without a traceback."""
    return DeployError(f"{key}: {message}")


def value(data: Mapping[str, Any], key: str) -> Any:
    found = data.get(key)
    return DEFAULTS[key] if found is None else found


def public_key_lines(data: Mapping[str, Any]) -> list[str]:
    """The OpenSSH public keys of admin_ssh_public_key_file (default: the lab key's .pub), checked."""
    raw = value(data, "admin_ssh_public_key_file") or str(lab_key_path().with_suffix(".pub"))
    path = Path(os.path.expanduser(str(raw)))
    if not path.is_file():
        raise fail("admin_ssh_public_key_file",
                   f"{path} does not exist; run `labwright lab up` to create the lab key or pass "
                   "--data admin_ssh_public_key_file=PATH")
    text = path.read_text(errors="replace")
    # Refuse a private key given by mistake: it would otherwise be copied onto the host.
    if "PRIVATE KEY" in text:
        raise fail("admin_ssh_public_key_file", f"{path} is a private key; give the .pub file")
    keys = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if not keys or not all(PUBLIC_KEY.match(k) for k in keys):
        raise fail("admin_ssh_public_key_file", f"{path} does not hold OpenSSH public keys")
    return keys


def extra_sshd_lines(found: Any) -> list[str]:
    """``sshd_extra_config``: sshd_config lines, as a list or one text of lines (ValueError: neither)."""
    lines = found.splitlines() if isinstance(found, str) else list(found) if isinstance(found, list | tuple) else None
    if lines is None or not all(isinstance(line, str) for line in lines):
        raise ValueError("must be a list of sshd_config lines")
    for line in lines:
        if control_character(line.replace("\t", " ")):   # a tab separates keyword and value in sshd_config
            raise ValueError(f"{line[:60]!r} holds a line break or control character; give one sshd_config line "
                             "per item")
        # sshd_config.d is included at the top of Debian's sshd_config: a Match block here would swallow every
        # later line of the main file, and Include pulls in what this deploy never checked (sshd_config(5))
        word = (line.split() or [""])[0]
        if word.lower() in ("match", "include"):
            article = "an" if word.lower() == "include" else "a"
            raise ValueError(f"{line.strip()[:60]!r}: {article} {word} line here would change what the hardened "
                             "options above it mean; put it in a file of your own under /etc/ssh/sshd_config.d")
    return [line.strip() for line in lines if line.strip()]


def admin_name(found: Any) -> str:
    """The admin user to create: schema.checks.service_user (a user name, never root)."""
    return service_user(found)


def zone_name(found: Any) -> str:
    text = str(found)
    if not isinstance(found, str) or not TIMEZONE.match(text):
        raise ValueError(f"{text[:80]!r} is not a zone name such as Europe/Berlin or Etc/UTC")
    return text


def locale_name(found: Any) -> str:
    text = str(found)
    if not isinstance(found, str) or not LOCALE.match(text):
        raise ValueError(f"{text[:80]!r} is not a locale name such as en_US.UTF-8")
    return text


@cache
def data_schema() -> type[Schema]:
    """The base deploy's keys, typed (built on first use: pydantic loads only with the data)."""
    from pydantic import BeforeValidator

    from labwright.schema.fields import Flag
    from labwright.schema.model import Schema

    class BaseData(Schema):
        admin_user: Annotated[str, BeforeValidator(admin_name)]
        admin_ssh_public_key_file: Annotated[str | None, BeforeValidator(
            lambda v: None if v in (None, "") else checks.line(v))]
        timezone: Annotated[str, BeforeValidator(zone_name)]
        locale: Annotated[str, BeforeValidator(locale_name)]
        unattended_upgrades: Flag
        sshd_permit_root_login: Annotated[str, BeforeValidator(permit_root_login_value)]
        admin_sudo_nopasswd: Flag
        sshd_extra_config: Annotated[list[str], BeforeValidator(extra_sshd_lines)]

    return BaseData


def locale_key(name: str) -> str:
    """Compare locales the way glibc does: `locale -a` lists en_US.UTF-8 as en_US.utf8."""
    lang, _, codeset = name.partition(".")
    return f"{lang}.{re.sub(r'[^a-z0-9]', '', codeset.lower())}" if codeset else lang


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def sshd_check(dropin: str) -> str:
    """`sshd -t` on the full configuration as it would be with the candidate drop-in in place.

    It runs on a copy (sshd_config with its Include pointed at a scratch directory holding the
    current drop-ins plus the candidate), so even the check never puts a broken file where sshd
    reads its configuration.
    """
    name = quote(PurePosixPath(dropin).name)
    return (
        'd=$(mktemp -d) && mkdir "$d/conf.d" '
        '&& for f in /etc/ssh/sshd_config.d/*.conf; do if [ -e "$f" ]; then cp "$f" "$d/conf.d/" || exit 1; fi; done '
        f'&& cp {{}} "$d/conf.d/"{name} '
        "&& sed \"s#/etc/ssh/sshd_config\\.d/#$d/conf.d/#g\" /etc/ssh/sshd_config > \"$d/sshd_config\" "
        '&& /usr/sbin/sshd -t -f "$d/sshd_config"; rc=$?; rm -rf "$d"; exit $rc'
    )


@dataclass(frozen=True)
class BaseSettings:
    admin_user: str
    admin_keys: list[str]
    timezone: str
    locale: str
    unattended: bool
    sshd_extra: list[str]
    permit_root_login: str = "no"
    sudo_nopasswd: bool = True

    @property
    def packages(self) -> list[str]:
        return BASE_PACKAGES + (["unattended-upgrades"] if self.unattended else [])

    @property
    def zone_file(self) -> str:
        return f"/usr/share/zoneinfo/{self.timezone}"

    @property
    def locale_pattern(self) -> str:
        """The locale as a grep/sed regex: LOCALE admits only [A-Za-z0-9_.@-], of which only the dot is special."""
        return self.locale.replace(".", r"\.")

    def render_sudoers(self) -> str:
        return JINJA.get_template("sudoers-admin.j2").render(admin_user=self.admin_user, nopasswd=self.sudo_nopasswd)

    def render_auto_upgrades(self) -> str:
        return JINJA.get_template("20auto-upgrades.j2").render(flag="1" if self.unattended else "0")

    def render_sshd_dropin(self) -> str:
        return JINJA.get_template("sshd-labwright.conf.j2").render(extra_lines=self.sshd_extra,
                                                                  permit_root_login=self.permit_root_login)

    @property
    def sshd_effective(self) -> dict[str, str]:
        """What ``sshd -T`` must print for the hardening options (lower-case names, as it prints them)."""
        return {"permitrootlogin": self.permit_root_login, "passwordauthentication": "no",
                "kbdinteractiveauthentication": "no", "permitemptypasswords": "no", "pubkeyauthentication": "yes"}


def settings_from(data: Mapping[str, Any]) -> BaseSettings:
    """Read and check the host data, in the deploy's order (the first bad key is the one reported)."""
    from labwright.deploy_data import refuse_misspelt_keys
    from labwright.schema.model import parse

    refuse_misspelt_keys(data, DEFAULTS, "docs/base.md")
    c = parse(data_schema(), {key: value(data, key) for key in DEFAULTS}, error=DeployError).model_dump()
    admin_keys = public_key_lines(data)
    return BaseSettings(c["admin_user"], admin_keys, c["timezone"], c["locale"], c["unattended_upgrades"],
                        c["sshd_extra_config"], c["sshd_permit_root_login"], c["admin_sudo_nopasswd"])


def has_usable_password(shadow_field: str | None) -> bool:
    """A shadow password field someone can type a password for: not empty, not locked (``!``), not ``*``."""
    field = (shadow_field or "").strip()
    return bool(field) and not field.startswith(("!", "*"))


def permit_root_login(data: Mapping[str, Any]) -> str:
    """``sshd_permit_root_login``: ``no`` unless the host data keeps root's key logins on purpose."""
    try:
        return permit_root_login_value(value(data, "sshd_permit_root_login"))
    except ValueError as error:
        raise fail("sshd_permit_root_login", str(error)) from None


def permit_root_login_value(found: Any) -> str:
    text = "no" if found is False else str(found).strip().lower()
    text = "prohibit-password" if text == "without-password" else text
    if text not in PERMIT_ROOT_LOGIN:
        raise ValueError(f"{str(found)[:80]!r} is not one of {', '.join(PERMIT_ROOT_LOGIN)} (root logins with a "
                         "password are not offered; keep root's key logins with prohibit-password)")
    return text


def sshd_effective_check(expected: Mapping[str, str], dropin: str = SSHD_DROPIN, report: bool = False) -> str:
    """A command that fails, in one line per option, when ``sshd -T`` (the configuration sshd really uses, every
    file and Include read) does not print the expected value: it names the first file that sets the option
    otherwise, in the order sshd reads them (the drop-ins in glob order, then sshd_config; sshd keeps the first).
    ``report``: the lines go to stdout and it exits 0 (a fact's command); nothing when sshd is not installed."""
    pairs = " ".join(f"{quote(k)}={quote(v)}" for k, v in expected.items())
    to, end = (("", "exit 0") if report else (" >&2", "exit $bad"))
    return (
        ("[ -x /usr/sbin/sshd ] || exit 0; " if report else "")
        + f"t=$(/usr/sbin/sshd -T 2>&1) || {{ echo \"labwright: sshd -T failed: $(echo \"$t\" | tail -1)\"{to}; "
        f"{'exit 0' if report else 'exit 1'}; }}; "
        f"bad=0; for pair in {pairs}; do o=${{pair%%=*}}; want=${{pair#*=}}; "
        "got=$(printf '%s\\n' \"$t\" | awk -v o=\"$o\" '$1 == o { print $2; exit }'); "
        # OpenSSH 9.2 (Debian 12) still prints prohibit-password under its old name
        '[ "$got" = without-password ] && got=prohibit-password; '
        '[ "$got" = "$want" ] && continue; bad=1; '
        # the first file (in sshd's reading order) that sets the option is the one whose value sshd kept
        "first=$(for f in /etc/ssh/sshd_config.d/*.conf /etc/ssh/sshd_config; do [ -f \"$f\" ] && "
        "grep -Eiq \"^[[:space:]]*$o([[:space:]]|=)\" \"$f\" && { echo \"$f\"; break; }; done); "
        "echo \"labwright: sshd -T says $o $got, not $want: ${first:-a Match block or a file outside sshd_config.d} "
        f"sets it before {dropin} (sshd keeps the first value it reads); remove it there\"{to}; done; {end}"
    )
