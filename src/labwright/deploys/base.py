"""Base deploy: timezone, locale, unattended upgrades, an admin user with the lab key, sshd hardening.

The host data, its checks and the rendered files are labwright.base.deploy_data; see deploys/base.py (the pyinfra
CLI shim, with usage) and docs/base.md.
"""

from __future__ import annotations

import getpass
from io import StringIO
from pathlib import PurePosixPath

from pyinfra import host
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File, FindInFile, Link, Sha1File
from pyinfra.facts.server import Locales, Users
from pyinfra.operations import files, server

from labwright.base.deploy_data import (
    AUTO_UPGRADES,
    SSHD_DROPIN,
    SSHD_DROPIN_OLD,
    fail,
    has_usable_password,
    locale_key,
    settings_from,
    sha1,
    sshd_check,
    sshd_effective_check,
)
from labwright.deploys.common import install_missing
from labwright.facts.sshd import SshdEffectiveProblems
from labwright.guestlock import locked
from labwright.shell import quote


def ssh_as_root() -> bool:
    """This run reaches the host over SSH as root (``--user root``, ``ssh_user: root``, or no user given and the
    control machine's own user is root, as paramiko then logs in)."""
    if host.connector_cls.__name__ != "SSHConnector":
        return False
    return str(host.data.get("ssh_user") or getpass.getuser()) == "root"


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
    quoted = quote(stage)
    server.shell(
        name=f"{label}: validate, then install",
        commands=[
            f"if ! ( {check.format(quoted)} ); then rm -f {quoted}; "
            f"echo 'labwright: {label}: candidate rejected, {dest} left unchanged' >&2; exit 1; fi",
            f"mv -f {quoted} {quote(dest)}",
        ],
    )
    return True


@locked("Base")
def deploy_base() -> None:
    """Timezone, locale, unattended upgrades, the admin user and its sudoers file, the sshd drop-in.

    Every step compares against facts first, so a second run changes nothing and, because apt only runs when a
    package is missing, it needs no network and finishes in seconds.
    """
    # --- read and check host data before touching anything ------------------------------------------
    s = settings_from(host.data.dict())
    if s.permit_root_login == "no" and ssh_as_root():
        raise fail("sshd_permit_root_login", f"{host.name} is reached over SSH as root, and PermitRootLogin no "
                   "would shut that login out after this run; run it as the admin user (pyinfra --user "
                   f"{s.admin_user} --sudo) once it exists, or keep root's key logins on this host on purpose: "
                   "--data sshd_permit_root_login=prohibit-password (nothing was changed)")

    if not s.sudo_nopasswd:
        # sudo would ask for a password: one the admin can type must exist, or nobody could sudo after this run
        shadow = (host.get_fact(Users).get(s.admin_user) or {}).get("password")
        if not has_usable_password(shadow):
            raise fail("admin_sudo_nopasswd", f"false, but {s.admin_user} has no password on {host.name} to type "
                       f"for sudo (its shadow entry is {'locked' if shadow else 'missing'}); set one first (passwd "
                       f"{s.admin_user} there), or keep admin_sudo_nopasswd=true (nothing was changed)")

    # --- packages: apt only runs (and only refreshes its lists) when something is missing -------------
    installed = host.get_fact(DebPackages)  # read before the install: what the checks below know of the host
    install_missing(s.packages, "packages", name="Install missing base packages")

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
    timezone, zone_file = s.timezone, s.zone_file
    if "tzdata" in installed:
        # Some zones are links to others (UTC -> Etc/UTC), which the File fact does not report.
        if not (host.get_fact(File, path=zone_file) or host.get_fact(Link, path=zone_file)):
            raise fail("timezone", f"{timezone!r} is not a known zone on {host.name} (no {zone_file})")
    else:
        server.shell(name=f"Check timezone {timezone} exists", commands=[
            f"test -f {quote(zone_file)} || "
            f"{{ echo 'labwright: timezone: unknown zone {timezone}' >&2; exit 1; }}",
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
    locale, pattern = s.locale, s.locale_pattern
    if locale_key(locale) not in {locale_key(name) for name in host.get_fact(Locales)}:
        if "locales" in installed:
            # server.locale raises the same check from deep inside gevent; this names the data key.
            if not host.get_fact(FindInFile, path="/etc/locale.gen",
                                 pattern=f"^#*[[:space:]]*{pattern}[[:space:]]"):
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
    files.line(name=f"Default locale {locale}", path="/etc/default/locale", line=r"^LANG=.*$",
               replace=f"LANG={locale}")

    # --- admin user ----------------------------------------------------------------------------------------
    server.user(name=f"Admin user {s.admin_user}", user=s.admin_user, shell="/bin/bash", groups=["sudo"],
                append=True, create_home=True, public_keys=s.admin_keys)
    # USER_NAME admits no dots: sudo's includedir silently skips file names that contain one.
    install_validated(f"sudoers for {s.admin_user}", s.render_sudoers(), f"/etc/sudoers.d/labwright-{s.admin_user}",
                      mode="440", check="visudo -cqf {}")

    # --- unattended upgrades -------------------------------------------------------------------------------
    files.put(name=f"Unattended upgrades {'on' if s.unattended else 'off'}", src=StringIO(s.render_auto_upgrades()),
              dest=AUTO_UPGRADES, user="root", group="root", mode="644")

    # --- sshd hardening ------------------------------------------------------------------------------------
    server.service(name="ssh running and enabled", service="ssh", running=True, enabled=True)
    changed = install_validated("sshd hardening drop-in", s.render_sshd_dropin(), SSHD_DROPIN, mode="644",
                                check=sshd_check(SSHD_DROPIN))
    if host.get_fact(File, path=SSHD_DROPIN_OLD):
        # where labwright put it before: it sorted after cloud-init's 50-cloud-init.conf, which then won
        files.file(name=f"Old sshd drop-in {SSHD_DROPIN_OLD} removed", path=SSHD_DROPIN_OLD, present=False)
        changed = True
    if changed:
        # Reached only if the validate-and-install step above succeeded: pyinfra stops a host at its
        # first failed operation, so a rejected config is never reloaded.
        server.service(name="Reload ssh (drop-in changed)", service="ssh", reloaded=True)
        server.shell(name="sshd -T: the hardening is in effect", commands=[sshd_effective_check(s.sshd_effective)])
    else:
        # Nothing changes: what sshd uses now is what it will use; a file read before the drop-in may outvote it.
        problems = host.get_fact(SshdEffectiveProblems, expected=s.sshd_effective)
        if problems:
            raise DeployError(f"{host.name}: {problems[0].removeprefix('labwright: ')} (nothing was changed)")
