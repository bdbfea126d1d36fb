"""What a working desktop guest looks like, checked from a shell on it, with field note 003's troubleshooting table as
cause and fix for each failure. Used by `labwright desktop check` (through LXD exec) and by
labwright/verify/test_desktop.py (through testinfra), so both say the same thing.

A check runs shell commands through a :class:`labwright.hosts.Host` and reads each :class:`~labwright.hosts.Result`;
nothing here changes the guest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from labwright.desktop.recipe import CHROME_PACKAGES, DEFAULT_PORT, DEFAULT_USER, RECORD, SESMAN_PORT
from labwright.facts.desktop import parse_ini_section
from labwright.hosts import Host
from labwright.shell import quote
from labwright.textio import loads_json

XRDP_INI = "/etc/xrdp/xrdp.ini"
SESMAN_LOG = "/var/log/xrdp-sesman.log"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    cause: str = ""
    fix: str = ""

    def line(self) -> str:
        if self.ok:
            return f"ok    {self.name}: {self.detail}"
        return f"FAIL  {self.name}: {self.detail}; cause: {self.cause}; fix: {self.fix}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Expected:
    user: str = DEFAULT_USER
    port: int = DEFAULT_PORT
    listen: str = "lan"
    firefox_source: str = "mozilla"

    @property
    def firefox_package(self) -> str:
        return "firefox" if self.firefox_source == "mozilla" else "firefox-esr"


def read_record(host: Host, overrides: dict[str, Any] | None = None) -> Expected:
    """What the deploy recorded on the guest (RECORD), with explicit values winning."""
    result = host.run(f"cat {RECORD} 2>/dev/null")
    record: dict[str, Any] = {}
    if result.ok and result.stdout.strip():
        try:
            record = loads_json(result.stdout)
        except json.JSONDecodeError:
            record = {}
    values: dict[str, Any] = {k: record[k] for k in ("user", "port", "listen", "firefox_source") if k in record}
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return Expected(user=str(values.get("user", DEFAULT_USER)), port=int(values.get("port", DEFAULT_PORT)),
                    listen=str(values.get("listen", "lan")),
                    firefox_source=str(values.get("firefox_source", "mozilla")))


def policy_origins(policy: str) -> tuple[str | None, int | None, list[str]]:
    """``apt-cache policy PKG`` -> (installed version, its pin priority, the sources it is available from)."""
    installed = re.search(r"^\s+Installed:\s+(\S+)", policy, re.M)
    version = installed.group(1) if installed and installed.group(1) != "(none)" else None
    priority: int | None = None
    sources: list[str] = []
    inside = False
    for line in policy.splitlines():
        star = re.match(r"(?a)^ \*\*\* (\S+) (-?\d+)", line)
        if star:
            inside, priority = True, int(star.group(2))
            continue
        if inside:
            entry = re.match(r"(?a)^\s{6,}(-?\d+) (\S+)", line)
            if entry and not line.startswith(" " * 5 + "**"):
                if entry.group(2) != "/var/lib/dpkg/status":
                    sources.append(entry.group(2))
                continue
            if line.strip():
                break
    return version, priority, sources


def _listeners(host: Host, port: int) -> list[str]:
    result = host.run(f"ss -Hltn 'sport = :{int(port)}'")
    return [line.split()[3] for line in result.stdout.splitlines() if result.ok and len(line.split()) >= 4]


def check_unprivileged(host: Host, want: Expected) -> Check:
    uid_map = host.run("cat /proc/1/uid_map").stdout
    rows = [line.split() for line in uid_map.splitlines() if line.strip()]
    privileged = any(len(r) == 3 and r[:2] == ["0", "0"] for r in rows)
    shown = " ".join(rows[0]) if rows else "unreadable"
    return Check("unprivileged container", not privileged, f"uid map {shown}",
                 "a privileged container gives the browser box the host's root",
                 "recreate the guest unprivileged (guest data `unprivileged: true`, Proxmox --unprivileged 1)")


def check_confinement(host: Host, want: Expected) -> Check:
    seccomp = host.run("sed -n 's/^Seccomp:[[:space:]]*//p' /proc/1/status").stdout
    apparmor = host.run("cat /sys/module/apparmor/parameters/enabled 2>/dev/null; echo; cat /proc/1/attr/current "
                        "2>/dev/null").stdout
    enabled, _, label = apparmor.partition("\n")
    unconfined = enabled.strip().upper().startswith("Y") and label.strip().startswith("unconfined")
    ok = seccomp.strip() not in ("", "0") and not unconfined
    detail = f"seccomp mode {seccomp.strip() or '?'}" + (f", AppArmor {label.strip()}" if enabled.strip() else
                                                          ", no AppArmor on this kernel")
    return Check("seccomp/AppArmor confinement kept", ok, detail,
                 "the container's seccomp filter or AppArmor profile was loosened (field note 003's Chrome bodge)",
                 "remove raw.seccomp/raw.apparmor/lxc.apparmor.profile overrides; Firefox needs none")


def check_xrdp_listening(host: Host, want: Expected) -> Check:
    found = _listeners(host, want.port)
    if want.listen == "lan":
        ok = any(a.split(":")[0] in ("*", "0.0.0.0", "[::]") or a.startswith("[::ffff:0.0.0.0]") for a in found)
        where = "all addresses"
    else:
        ok = any(a.rsplit(":", 1)[0] in (want.listen, f"[::ffff:{want.listen}]") for a in found)
        where = want.listen
    return Check("xrdp listening", ok, f"port {want.port} on {', '.join(found) or 'nothing'} (want {where})",
                 "xrdp is not running, or xrdp.ini [Globals] port= differs from the deploy's data",
                 "systemctl restart xrdp; journalctl -u xrdp; re-run deploys/desktop.py")


def check_sesman_listening(host: Host, want: Expected) -> Check:
    found = _listeners(host, SESMAN_PORT)
    return Check("xrdp-sesman listening", bool(found), f"port {SESMAN_PORT} on {', '.join(found) or 'nothing'}",
                 "xrdp-sesman is not running: logins are accepted by xrdp but no session can start",
                 "systemctl enable --now xrdp-sesman; see /var/log/xrdp-sesman.log")


def check_tls(host: Host, want: Expected) -> Check:
    ini = host.run(f"cat {XRDP_INI} 2>/dev/null").stdout
    globals_ = parse_ini_section(ini.splitlines(), "Globals")
    layer = globals_.get("security_layer", "?")
    key = globals_.get("key_file") or "/etc/xrdp/key.pem"
    groups = host.run("id -nG xrdp 2>/dev/null").stdout
    readable = host.run(f"runuser -u xrdp -- test -r {quote(key)}").rc
    in_group = "ssl-cert" in groups.split()
    last = host.run("grep -h 'TLS connection established' /var/log/xrdp.log 2>/dev/null | tail -n 1").stdout
    version = re.search(r": (TLSv[0-9.]+)", last)
    ok = layer in ("tls", "hybrid") and readable == 0
    detail = (f"security_layer={layer}, key {key} {'readable' if readable == 0 else 'NOT readable'} by xrdp"
              f"{'' if in_group else ', xrdp not in ssl-cert'}"
              f"{f', last connection {version.group(1)}' if version else ''}")
    return Check("TLS in use", ok, detail,
                 "xrdp cannot read its private key ('Cannot read private key file ... Permission denied'): it falls "
                 "back to RDP security and logins fail with 'MAC checksum error'",
                 "adduser xrdp ssl-cert; set security_layer=tls in xrdp.ini [Globals]; systemctl restart xrdp")


def check_xorg_backend(host: Host, want: Expected) -> Check:
    status = host.run("dpkg-query -W -f='${Status}' xorgxrdp 2>/dev/null").stdout
    xorg = host.run("test -x /usr/lib/xorg/Xorg").rc
    errors = host.run(f"grep -c 'Error starting X server' {SESMAN_LOG} 2>/dev/null").stdout
    ok = status.strip().endswith("installed") and xorg == 0
    detail = (f"xorgxrdp {'installed' if status.strip().endswith('installed') else 'missing'}, /usr/lib/xorg/Xorg "
              f"{'present' if xorg == 0 else 'missing'}")
    if errors.strip() not in ("", "0"):
        detail += f", {errors.strip()} 'Error starting X server' line(s) in {SESMAN_LOG}"
    return Check("Xorg backend (no grey screen)", ok, detail,
                 "blank grey screen on connect: xrdp has no Xorg backend, so the session dies at once",
                 "apt-get install --no-install-recommends xorg xorgxrdp")


def _home(host: Host, user: str) -> str:
    entry = host.run(f"getent passwd {quote(user)}").stdout
    fields = entry.strip().split(":")
    return fields[5] if len(fields) >= 7 else f"/home/{user}"


def check_session(host: Host, want: Expected) -> Check:
    home = _home(host, want.user)
    session = host.run(f"cat {quote(home)}/.xsession 2>/dev/null").stdout
    xfce = "xfce" in session.lower()
    mate = "mate-session" in session
    installed = host.run("command -v mate-session >/dev/null").rc
    if xfce:
        return Check("MATE session", False, f"{home}/.xsession starts XFCE",
                     "launcher not starting: XFCE 4.18 runs a desktop launcher only once it is marked trusted (GIO "
                     "metadata, which needs a gvfs daemon the minimal image lacks)",
                     f"use MATE: printf 'exec mate-session\\n' > {home}/.xsession (deploys/desktop.py does), or a "
                     "plain executable script instead of the launcher")
    return Check("MATE session", mate and installed == 0,
                 f"{home}/.xsession {'runs mate-session' if mate else 'does not run mate-session'}"
                 f"{'' if installed == 0 else ', mate-session not installed'}",
                 "xrdp starts the system default session (or none) for this user",
                 f"printf 'exec mate-session\\n' > {home}/.xsession; apt-get install mate-desktop-environment-core")


def check_caja(host: Host, want: Expected) -> Check:
    home = _home(host, want.user)
    path = f"{home}/.config/caja"
    owner = host.run(f"stat -c %U {quote(path)} 2>/dev/null").stdout
    writable = host.run(f"runuser -u {quote(want.user)} -- test -w {quote(path)}").rc
    ok = owner.strip() == want.user and writable == 0
    detail = f"{path} " + (f"owned by {owner.strip()}" if owner.strip() else "missing") + \
        ("" if writable == 0 else f", not writable by {want.user}")
    return Check("caja config dir", ok, detail, "caja complains on login: ~/.config/caja missing or unwritable",
                 f"mkdir -p {quote(path)} && chown -R {quote(want.user + ':')} {quote(home + '/.config')}")


def check_launcher(host: Host, want: Expected) -> Check:
    home = _home(host, want.user)
    path = f"{home}/Desktop/{want.firefox_package}.desktop"
    stat = host.run(f"stat -c '%U %a' {quote(path)} 2>/dev/null").stdout
    owner, _, mode = stat.strip().partition(" ")
    ok = owner == want.user and bool(mode) and int(mode[-3], 8) & 1 == 1
    return Check("Firefox launcher on the desktop", ok,
                 f"{path} " + (f"owner {owner}, mode {mode}" if owner else "missing"),
                 "no launcher, or one MATE will not run (not executable / not the user's)",
                 f"install -o {want.user} -m 755 /usr/share/applications/{want.firefox_package}.desktop {path}")


def check_no_chrome(host: Host, want: Expected) -> Check:
    names = " ".join(CHROME_PACKAGES)
    pkgs = host.run(f"dpkg-query -W -f='${{Package}} ${{Status}}\\n' {names} 2>/dev/null | grep ' installed$' "
                    "| cut -d' ' -f1").stdout
    binaries = host.run("for b in google-chrome google-chrome-stable chromium chromium-browser; do command -v $b; "
                        "done 2>/dev/null; true").stdout
    found = sorted(set(pkgs.split()) | set(binaries.split()))
    return Check("no Chrome", not found, ", ".join(found) if found else "no Chrome/Chromium installed",
                 "Chrome says 'offline' though curl works: its network-service seccomp sandbox clashes with the "
                 "unprivileged container's (--no-sandbox does not relax it)",
                 f"use Firefox; apt-get purge {' '.join(found) or 'google-chrome-stable'}")


def check_firefox_origin(host: Host, want: Expected) -> Check:
    package = want.firefox_package
    policy = host.run(f"apt-cache policy {package} 2>/dev/null").stdout
    version, priority, sources = policy_origins(policy)
    mozilla = [s for s in sources if "packages.mozilla.org" in s]
    if want.firefox_source == "mozilla":
        ok = bool(version) and bool(mozilla) and priority == 1000
        want_text = "packages.mozilla.org pinned at 1000"
    else:
        ok = bool(version) and bool(sources) and not mozilla
        want_text = "the distribution's archive"
    detail = (f"{package} {version or 'not installed'} from {', '.join(sources) or 'no repository'}"
              f" (priority {priority}; want {want_text})")
    if version and not sources:
        return Check("Firefox from the intended origin", False, detail,
                     "the apt lists are empty (apt-get clean'd image?), so the origin cannot be told",
                     "apt-get update, then check again")
    return Check("Firefox from the intended origin", ok, detail,
                 "Firefox missing or from another origin (Ubuntu's firefox is a snap stub that fails unprivileged)",
                 "re-run deploys/desktop.py with desktop_firefox_source=" + want.firefox_source)


CHECKS: tuple[Callable[[Host, Expected], Check], ...] = (
    check_unprivileged, check_confinement, check_xrdp_listening, check_sesman_listening, check_tls,
    check_xorg_backend, check_session, check_caja, check_launcher, check_no_chrome, check_firefox_origin,
)


def run_checks(host: Host, want: Expected) -> list[Check]:
    return [check(host, want) for check in CHECKS]
