"""Base deploy: timezone, locale, unattended upgrades, an admin user with the lab key, sshd hardening.

    pyinfra -y inventories/local.py deploys/base.py
    pyinfra -y @lxd/lw-node1 deploys/base.py --data unattended_upgrades=true
    labwright verify base --hosts=lxc://lw-node1

Host data (defaults in DEFAULTS below, documented in docs/base.md): admin_user,
admin_ssh_public_key_file, timezone, locale, unattended_upgrades, sshd_extra_config.

Every step compares against facts first, so a second run changes nothing and, because apt only
runs when a package is missing, it needs no network and finishes in seconds.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from io import StringIO
from pathlib import Path, PurePosixPath
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pyinfra import host
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File, FindInFile, Link, Sha1File
from pyinfra.facts.server import Locales
from pyinfra.operations import apt, files, server

from labwright.lab.keys import lab_key_path

SSHD_DROPIN = "/etc/ssh/sshd_config.d/50-labwright.conf"
AUTO_UPGRADES = "/etc/apt/apt.conf.d/20auto-upgrades"
BASE_PACKAGES = ["openssh-server", "sudo", "locales", "tzdata"]

DEFAULTS: dict[str, Any] = {
    "admin_user": "labadmin",
    # Read lazily: lab_key_path() creates labwright's data directory, which only matters when used.
    "admin_ssh_public_key_file": None,
    "timezone": "Etc/UTC",
    "locale": "en_US.UTF-8",
    "unattended_upgrades": False,
    "sshd_extra_config": [],
}

TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "base"
# trim_blocks keeps {% %} lines out of the output, so the rendered files carry no stray blank lines.
JINJA = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, trim_blocks=True,
                    lstrip_blocks=True, keep_trailing_newline=True)

USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
TIMEZONE = re.compile(r"^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$")
LOCALE = re.compile(r"^[A-Za-z0-9_.@-]+$")
PUBLIC_KEY = re.compile(r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp\d+|sk-[a-z0-9-]+@openssh\.com)\s+[A-Za-z0-9+/=]+")


def fail(key: str, message: str) -> DeployError:
    """One-line error naming the host data key; pyinfra prints DeployError without a traceback."""
    return DeployError(f"{key}: {message}")


def data(key: str) -> Any:
    value = host.data.get(key)
    return DEFAULTS[key] if value is None else value


def as_bool(key: str) -> bool:
    value = data(key)
    # --data parses true/false and integers, but an inventory may hold "yes"/"off" strings.
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise fail(key, f"{value!r} is not a boolean (use true or false)")


def public_key_lines() -> list[str]:
    raw = data("admin_ssh_public_key_file") or str(lab_key_path().with_suffix(".pub"))
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


def extra_sshd_lines() -> list[str]:
    value = data("sshd_extra_config")
    lines = value.splitlines() if isinstance(value, str) else list(value)
    if not all(isinstance(line, str) for line in lines):
        raise fail("sshd_extra_config", "must be a list of sshd_config lines")
    return [line.strip() for line in lines if line.strip()]


def locale_key(name: str) -> str:
    """Compare locales the way glibc does: `locale -a` lists en_US.UTF-8 as en_US.utf8."""
    lang, _, codeset = name.partition(".")
    return f"{lang}.{re.sub(r'[^a-z0-9]', '', codeset.lower())}" if codeset else lang


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def install_validated(label: str, text: str, dest: str, mode: str, check: str) -> bool:
    """Install ``text`` at ``dest`` only after ``check`` (a command; ``{}`` is the candidate) passes.

    The candidate is staged next to ``dest`` under a dot-name that neither sshd's ``*.conf`` glob
    nor sudo's includedir (which skips names containing a dot) reads, then moved into place, which
    is atomic on one filesystem. A rejected candidate is removed and the live file stays untouched.
    Returns True when the file will change (so callers can reload the service that reads it).
    """
    if host.get_fact(Sha1File, path=dest) == sha1(text):
        # Content is right; still keep owner and mode (sudo ignores a world-writable sudoers file).
        files.file(name=f"{label}: owner and mode", path=dest, user="root", group="root", mode=mode)
        return False
    dest_path = PurePosixPath(dest)
    stage = str(dest_path.with_name(f".{dest_path.name}.labwright-new"))
    files.put(name=f"{label}: stage candidate", src=StringIO(text), dest=stage, user="root", group="root",
              mode=mode)
    quoted = shlex.quote(stage)
    server.shell(
        name=f"{label}: validate, then install",
        commands=[
            f"if ! ( {check.format(quoted)} ); then rm -f {quoted}; "
            f"echo 'labwright: {label}: candidate rejected, {dest} left unchanged' >&2; exit 1; fi",
            f"mv -f {quoted} {shlex.quote(dest)}",
        ],
    )
    return True


def sshd_check(dropin: str) -> str:
    """`sshd -t` on the full configuration as it would be with the candidate drop-in in place.

    It runs on a copy (sshd_config with its Include pointed at a scratch directory holding the
    current drop-ins plus the candidate), so even the check never puts a broken file where sshd
    reads its configuration.
    """
    name = shlex.quote(PurePosixPath(dropin).name)
    return (
        'd=$(mktemp -d) && mkdir "$d/conf.d" '
        '&& for f in /etc/ssh/sshd_config.d/*.conf; do if [ -e "$f" ]; then cp "$f" "$d/conf.d/" || exit 1; fi; done '
        f'&& cp {{}} "$d/conf.d/"{name} '
        "&& sed \"s#/etc/ssh/sshd_config\\.d/#$d/conf.d/#g\" /etc/ssh/sshd_config > \"$d/sshd_config\" "
        '&& /usr/sbin/sshd -t -f "$d/sshd_config"; rc=$?; rm -rf "$d"; exit $rc'
    )


# --- read and check host data before touching anything ------------------------------------------
admin_user = str(data("admin_user"))
if not USER_NAME.match(admin_user) or admin_user == "root":
    raise fail("admin_user", f"{admin_user!r} is not a valid name for a new admin user")
admin_keys = public_key_lines()
timezone = str(data("timezone"))
if not TIMEZONE.match(timezone):
    raise fail("timezone", f"{timezone!r} is not a zone name such as Europe/Berlin or Etc/UTC")
locale = str(data("locale"))
if not LOCALE.match(locale):
    raise fail("locale", f"{locale!r} is not a locale name such as en_US.UTF-8")
unattended = as_bool("unattended_upgrades")
sshd_extra = extra_sshd_lines()

# --- packages: apt only runs (and only refreshes its lists) when something is missing -------------
wanted_packages = BASE_PACKAGES + (["unattended-upgrades"] if unattended else [])
installed = host.get_fact(DebPackages)
missing = [p for p in wanted_packages if p not in installed]
if missing:
    # cache_time: a second attempt right after a failed one need not refresh the lists again.
    apt.update(name="Refresh apt lists (packages missing)", cache_time=3600)
    apt.packages(name="Install missing base packages", packages=missing, no_recommends=True)

# sshd only reads the drop-in through this Include (Debian's default, at the top of sshd_config); without
# it the hardening would silently do nothing. Refused here, before any operation runs.
if "openssh-server" in installed and not host.get_fact(
    FindInFile, path="/etc/ssh/sshd_config", pattern=r"^[[:space:]]*Include[[:space:]].*sshd_config\.d/"
):
    raise DeployError(f"/etc/ssh/sshd_config on {host.name} does not Include sshd_config.d/*.conf, so "
                      f"{SSHD_DROPIN} would have no effect; restore Debian's Include line")

# --- timezone ----------------------------------------------------------------------------------------
# Not server.timezone: its fact resolves /etc/localtime fully, so a zone that is itself a link
# (UTC -> Etc/UTC) would look changed on every run. timedatectl also only writes this symlink.
zone_file = f"/usr/share/zoneinfo/{timezone}"
if "tzdata" in installed:
    # Some zones are links to others (UTC -> Etc/UTC), which the File fact does not report.
    if not (host.get_fact(File, path=zone_file) or host.get_fact(Link, path=zone_file)):
        raise fail("timezone", f"{timezone!r} is not a known zone on {host.name} (no {zone_file})")
else:
    server.shell(name=f"Check timezone {timezone} exists", commands=[
        f"test -f {shlex.quote(zone_file)} || {{ echo 'labwright: timezone: unknown zone {timezone}' >&2; exit 1; }}",
    ])
localtime = files.link(name=f"Timezone {timezone}: /etc/localtime", path="/etc/localtime", target=zone_file,
                       force=True, force_backup=False)
# systemd-timedated (if it happens to be running) caches the zone it read at start, so timedatectl
# would go on showing the old one until it idles out; try-restart leaves a stopped one stopped.
server.shell(name="Refresh systemd-timedated", commands=[
    "if command -v systemctl >/dev/null; then systemctl try-restart systemd-timedated.service || true; fi",
], _if=localtime.did_change)
files.put(name=f"Timezone {timezone}: /etc/timezone", src=StringIO(f"{timezone}\n"), dest="/etc/timezone",
          user="root", group="root", mode="644")

# --- locale --------------------------------------------------------------------------------------------
if locale_key(locale) not in {locale_key(name) for name in host.get_fact(Locales)}:
    # LOCALE admits only [A-Za-z0-9_.@-]; of those only the dot means something in a grep/sed regex.
    pattern = locale.replace(".", r"\.")
    if "locales" in installed:
        # server.locale raises the same check from deep inside gevent; this names the data key.
        if not host.get_fact(FindInFile, path="/etc/locale.gen", pattern=f"^#*[[:space:]]*{pattern}[[:space:]]"):
            raise fail("locale", f"{locale!r} is not listed in /etc/locale.gen on {host.name} "
                       "(see /usr/share/i18n/SUPPORTED)")
        server.locale(name=f"Generate locale {locale}", locale=locale)
    else:
        # /etc/locale.gen only appears with the locales package installed above, so server.locale
        # (which reads it now, while preparing) cannot be used on this first run.
        server.shell(name=f"Generate locale {locale}", commands=[
            f"sed -i -E 's/^#[[:space:]]*({pattern}[[:space:]])/\\1/' /etc/locale.gen",
            f"grep -Eq '^{pattern}[[:space:]]' /etc/locale.gen || "
            f"{{ echo 'labwright: locale: {locale} is not in /etc/locale.gen' >&2; exit 1; }}",
            "locale-gen",
        ])
files.line(name=f"Default locale {locale}", path="/etc/default/locale", line=r"^LANG=.*$", replace=f"LANG={locale}")

# --- admin user ----------------------------------------------------------------------------------------
server.user(name=f"Admin user {admin_user}", user=admin_user, shell="/bin/bash", groups=["sudo"], append=True,
            create_home=True, public_keys=admin_keys)
# USER_NAME admits no dots: sudo's includedir silently skips file names that contain one.
install_validated(
    f"sudoers for {admin_user}",
    JINJA.get_template("sudoers-admin.j2").render(admin_user=admin_user),
    f"/etc/sudoers.d/labwright-{admin_user}",
    mode="440",
    check="visudo -cqf {}",
)

# --- unattended upgrades -------------------------------------------------------------------------------
files.put(name=f"Unattended upgrades {'on' if unattended else 'off'}",
          src=StringIO(JINJA.get_template("20auto-upgrades.j2").render(flag="1" if unattended else "0")),
          dest=AUTO_UPGRADES, user="root", group="root", mode="644")

# --- sshd hardening ------------------------------------------------------------------------------------
server.service(name="ssh running and enabled", service="ssh", running=True, enabled=True)
if install_validated(
    "sshd hardening drop-in",
    JINJA.get_template("sshd-labwright.conf.j2").render(extra_lines=sshd_extra),
    SSHD_DROPIN,
    mode="644",
    check=sshd_check(SSHD_DROPIN),
):
    # Reached only if the validate-and-install step above succeeded: pyinfra stops a host at its
    # first failed operation, so a rejected config is never reloaded.
    server.service(name="Reload ssh (drop-in changed)", service="ssh", reloaded=True)
