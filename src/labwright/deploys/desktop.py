"""Desktop: xrdp + xorgxrdp + MATE + Firefox in an unprivileged LXC.

See deploys/desktop.py (the pyinfra CLI shim, with usage) and docs/desktop.md.
"""

from __future__ import annotations

import json
import os
import sys
from io import StringIO

from pyinfra import host
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.server import Users
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from labwright import aptlock
from labwright.deploy_data import refuse_unknown_keys
from labwright.desktop import password as passwords
from labwright.desktop.recipe import (
    CERT_DIR,
    CHROME_PACKAGES,
    MOZILLA_FINGERPRINT,
    MOZILLA_KEY,
    MOZILLA_KEY_URL,
    MOZILLA_LIST,
    MOZILLA_LIST_TEXT,
    MOZILLA_PIN,
    MOZILLA_PIN_TEXT,
    MOZILLA_PREREQUISITES,
    PASSWORD_ENV,
    RECORD,
    check_confinement,
    check_distro,
    check_guest_data,
    check_password,
    packages,
    parse_os_release,
    parse_settings,
)
from labwright.errors import LabwrightError
from labwright.facts.desktop import DesktopGuest
from labwright.facts.llamacpp import PortListeners
from labwright.guestlock import locked
from labwright.operations import desktop
from labwright.operations import systemd as systemd_ops
from labwright.shell import quote
from labwright.snapshots.deploy import check_snapshot_data, snapshot

# A shadow password field that lets no one log in: useradd's "!" for a new user, "*", or empty.
NO_PASSWORD = ("", "!", "!!", "*", "!*")


def read_as_root(host_name: str, path: str) -> str:
    """The command an operator runs on this machine to read ``path`` in the guest ``host_name``, as root."""
    for prefix, tool in (("@lxd/", "lxc"), ("@incus/", "incus")):
        if host_name.startswith(prefix):
            return f"{tool} exec {quote(host_name.removeprefix(prefix))} -- cat {quote(path)}"
    return f"sudo cat {quote(path)} (on {host_name})"


SESSION_TEXT = "#!/bin/sh\n# MATE for xrdp sessions (labwright deploys/desktop.py)\nexec mate-session\n"
DATA_KEYS = ("desktop_user", "desktop_port", "desktop_listen", "desktop_firefox_source", "desktop_stage")


@locked("Desktop")
def deploy_desktop() -> None:
    """Desktop: xrdp + xorgxrdp + MATE + Firefox in an unprivileged LXC."""
    # --- read and check everything before touching anything ------------------------------------------
    refuse_unknown_keys(host.data.dict(), "desktop", [key.removeprefix("desktop_") for key in DATA_KEYS],
                        "docs/desktop.md")
    check_snapshot_data()
    try:
        settings = parse_settings({k: host.data.get(k) for k in DATA_KEYS}, host.name)
        check_guest_data(host.data.get("guest"), host.name)
        # the environment is input too: checked before the first fact (sweep at 2b91fd1: a newline in the password
        # was reported only after the container's confinement)
        given_password = check_password(os.environ.get(PASSWORD_ENV), host.name)
        guest = host.get_fact(DesktopGuest)
        distro = parse_os_release(guest["os_release"])
        check_distro(distro, settings.firefox_source, host.name)
        check_confinement(guest["uid_map"], guest["seccomp"], guest["apparmor_enabled"], guest["apparmor_label"],
                          host.name)
    except LabwrightError as exc:
        raise DeployError(str(exc)) from None

    user = settings.user
    home = f"/home/{user}"
    installed = host.get_fact(DebPackages)
    existing = host.get_fact(Users).get(user)
    if settings.stage == "all":
        listeners = host.get_fact(PortListeners, port=settings.port, service="xrdp")
        # xrdp forks a child per connection that keeps the listening socket: every holder named xrdp is ours.
        if listeners["pids"] and set(listeners["names"]) != {"xrdp"}:
            holder = ", ".join(listeners["names"]) or "another process"
            raise DeployError(f"desktop_port: {settings.port} is already in use on {host.name} by {holder}; stop it or "
                              "set desktop_port (nothing was changed)")

    # The password never reaches a command line: a given one is hashed here and set through chpasswd -e reading a
    # root-only staged file; none given and the user has none (new, or left without one): generated on the guest
    # into a root-only file (desktop.user_password). An existing user's password is otherwise left alone.
    password_hash: str | None = None
    generate = False
    if settings.stage == "all":
        current = str((existing or {}).get("password") or "")
        if given_password is not None:
            if not passwords.matches(given_password, current):
                password_hash = passwords.sha512_crypt(given_password)
        elif current in NO_PASSWORD:
            generate = True

    # --- packages, without recommends ----------------------------------------------------------------
    wanted = packages(distro.id, settings.firefox_source)
    missing = [p for p in wanted if p not in installed]
    if missing or (settings.firefox_source == "mozilla" and any(p not in installed for p in MOZILLA_PREREQUISITES)):
        # Packages are about to be installed: snapshot the guest first (snapshot_before/keep/required; nothing for a
        # host that is not a container), so `labwright guest restore` undoes this run's desktop changes.
        snapshot(name="Snapshot before the desktop packages", step="desktop")
    refreshed = False
    if settings.firefox_source == "mozilla":
        pre = [p for p in MOZILLA_PREREQUISITES if p not in installed]
        if pre:
            # labwright.aptlock: each apt-get waits for another apt (unattended-upgrades) instead of failing on its lock
            server.shell(name="Refresh apt lists (Mozilla repository prerequisites missing)",
                         commands=[aptlock.update(cache_minutes=60)])
            server.shell(name="Install curl, gnupg, ca-certificates", commands=[aptlock.install(pre)])
            refreshed = True
        files.directory(name="/etc/apt/keyrings", path="/etc/apt/keyrings", mode="755", user="root", group="root")
        key = files.download(name="Mozilla's apt signing key", src=MOZILLA_KEY_URL, dest=MOZILLA_KEY, mode="644")
        server.shell(name="Check the key's fingerprint", _if=key.did_change, commands=[
            f"gpg -n -q --import --import-options import-show {MOZILLA_KEY} 2>/dev/null "
            f"| grep -q {MOZILLA_FINGERPRINT} "
            f"|| {{ rm -f {MOZILLA_KEY}; echo 'labwright: {MOZILLA_KEY_URL} is not Mozilla key {MOZILLA_FINGERPRINT}'"
            " >&2; exit 1; }"])
        source = files.put(name="Mozilla apt source (signed-by)", src=StringIO(MOZILLA_LIST_TEXT), dest=MOZILLA_LIST,
                           mode="644", user="root", group="root")
        pin = files.put(name="Pin Mozilla's packages at 1000 (no snap stub)", src=StringIO(MOZILLA_PIN_TEXT),
                        dest=MOZILLA_PIN, mode="644", user="root", group="root")
        server.shell(name="Refresh apt lists (Mozilla repository added)", commands=[aptlock.update()],
                     _if=any_changed(key, source, pin))
    else:
        # Switching back from Mozilla's repository leaves no source or pin behind.
        for path in (MOZILLA_LIST, MOZILLA_PIN, MOZILLA_KEY):
            files.file(name=f"No {path} (firefox source {settings.firefox_source})", path=path, present=False)
    if missing:
        if not refreshed:
            server.shell(name="Refresh apt lists (desktop packages missing)",
                         commands=[aptlock.update(cache_minutes=60)])
        server.shell(name=f"Install {len(missing)} desktop packages (no recommends)",
                     commands=[aptlock.install(missing)])
    chrome = [p for p in CHROME_PACKAGES if p in installed]
    if chrome:
        print(f"{host.name}: note: {', '.join(chrome)} is installed; it reports 'offline' in an unprivileged container "
              "(network-service seccomp sandbox): use Firefox; `labwright desktop check` flags it")

    if settings.stage == "all":
        # --- xrdp: TLS with a key of this guest's own, readable through ssl-cert; where to listen ----------
        group = server.user(name="xrdp in group ssl-cert (else TLS key unreadable: 'MAC checksum error')", user="xrdp",
                            groups=["ssl-cert"], append=True)
        files.directory(name=CERT_DIR, path=CERT_DIR, mode="755", user="root", group="root")
        cert = desktop.self_signed_certificate(name="xrdp TLS certificate", cert=f"{CERT_DIR}/cert.pem",
                                               key=f"{CERT_DIR}/key.pem", group="ssl-cert",
                                               subject=f"/CN={host.name.rsplit('/', 1)[-1].rsplit(':', 1)[-1]}")
        ini = desktop.xrdp_globals(name=f"xrdp.ini: port={settings.xrdp_port}, TLS only", values={
            "port": settings.xrdp_port, "security_layer": "tls", "certificate": f"{CERT_DIR}/cert.pem",
            "key_file": f"{CERT_DIR}/key.pem"})
        started = [systemd.service(name=f"{unit} enabled and running", service=f"{unit}.service", running=True,
                                   enabled=True) for unit in ("xrdp-sesman", "xrdp")]
        restarted = systemd_ops.restarted_foreign(name="Restart xrdp (config, certificate or group changed)",
                                                  service="xrdp.service", _if=any_changed(group, cert, ini))
        # systemctl returns before xrdp listens: wait for it, so a finished deploy takes connections (or says why not).
        server.shell(name=f"xrdp listening on {settings.xrdp_port}", _if=any_changed(restarted, *started), commands=[
            f"for i in $(seq 100); do ss -Hltn 'sport = :{settings.port}' | grep -q LISTEN && exit 0; sleep 0.2; done; "
            "journalctl -u xrdp -n 15 --no-pager -o cat >&2; echo 'labwright: xrdp is not listening after 20s' >&2; "
            "exit 1"])

        # --- the desktop user and a MATE session --------------------------------------------------------
        server.user(name=f"Desktop user {user}", user=user, shell="/bin/bash", home=home, create_home=True)
        if generate or password_hash is not None:
            desktop.user_password(name=f"Password of {user} ({'generated on the guest' if generate else 'given'}; "
                                       "by stdin, never on a command line)", user=user, password_hash=password_hash)
        files.put(name="MATE as the session (~/.xsession)", src=StringIO(SESSION_TEXT), dest=f"{home}/.xsession",
                  user=user, group=user, mode="755")
        for path in (f"{home}/.config", f"{home}/.config/caja", f"{home}/Desktop"):
            files.directory(name=f"{path} owned by {user}", path=path, user=user, group=user, mode="755")
        launcher = f"{settings.firefox_package}.desktop"
        desktop.copy_on_host(name="Firefox launcher on the desktop", src=f"/usr/share/applications/{launcher}",
                             dest=f"{home}/Desktop/{launcher}", user=user, group=user, mode="755")
        record = {"user": user, "port": settings.port, "listen": settings.listen,
                  "firefox_source": settings.firefox_source, "firefox_package": settings.firefox_package,
                  "distro": f"{distro.id} {distro.version}"}
        files.put(name=f"Record ({RECORD}) for `labwright desktop check`",
                  src=StringIO(json.dumps(record, indent=2, sort_keys=True) + "\n"), dest=RECORD, mode="644",
                  user="root", group="root", create_remote_dir=True)
        if generate:
            kept = desktop.password_file(user)
            if "--dry" in sys.argv:
                print(f"{host.name}: desktop user {user} would get a generated password in {kept} on the guest "
                      "(--dry applies nothing)")
            else:
                print(f"{host.name}: desktop user {user}: generated password in {kept} on the guest (root only, "
                      f"0600; never printed), read it with: {read_as_root(host.name, kept)}; set ${PASSWORD_ENV} to "
                      "choose one")
