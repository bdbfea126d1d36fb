"""What a desktop guest is made of, and the refusals that come before anything changes. Pure: no host access.

deploys/desktop.py reads its data through these functions, and the test cache (support.desktop)
hashes ``packages()`` so a changed package list always rebuilds the cached install.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from labwright.errors import BadInput
from labwright.schema.checks import service_user

FIREFOX_SOURCES = ("mozilla", "debian-esr")
DEFAULT_USER = "desk"
DEFAULT_PORT = 3389
SESMAN_PORT = 3350
PASSWORD_ENV = "LABWRIGHT_DESKTOP_PASSWORD"
RECORD = "/etc/labwright/desktop.json"  # what the deploy set up, read by `labwright desktop check`
CERT_DIR = "/etc/xrdp/labwright"  # a TLS key made on each guest (never one shared by every copy of an image)

MOZILLA_KEY_URL = "https://packages.mozilla.org/apt/repo-signing-key.gpg"
MOZILLA_KEY = "/etc/apt/keyrings/packages.mozilla.org.asc"
MOZILLA_FINGERPRINT = "35BAA0B33E9EB396F59CA838C0BA5CE6DC6315A3"  # Mozilla's published key fingerprint
MOZILLA_LIST = "/etc/apt/sources.list.d/mozilla.list"
MOZILLA_PIN = "/etc/apt/preferences.d/mozilla"
MOZILLA_LIST_TEXT = f"deb [signed-by={MOZILLA_KEY}] https://packages.mozilla.org/apt mozilla main\n"
MOZILLA_PIN_TEXT = "Package: *\nPin: origin packages.mozilla.org\nPin-Priority: 1000\n"

#: xrdp with the Xorg backend (without xorgxrdp the session dies on a grey screen), MATE core, and what an X
#: session under xrdp needs. x11-utils gives xprop/xwininfo to `desktop check` and to people debugging a session.
BASE_PACKAGES = (
    "xrdp", "xorgxrdp", "xserver-xorg-core", "mate-desktop-environment-core", "dbus-x11", "xauth", "ssl-cert",
    "openssl", "x11-utils",
)
#: Needed before Mozilla's repository can be added: fetch and check its key over verified TLS.
MOZILLA_PREREQUISITES = ("ca-certificates", "curl", "gnupg")
#: Browsers that do not work in an unprivileged container (field note 003's "Chrome says offline").
CHROME_PACKAGES = ("google-chrome-stable", "google-chrome-beta", "google-chrome-unstable", "chromium")

#: LXD config that hands the container more than an ordinary unprivileged one: field note 003's "AppArmor unconfined"
#: bodge and its relatives. A desktop guest talks to the open internet; it keeps its confinement.
DOWNGRADE_KEYS = ("security.privileged", "raw.apparmor", "raw.seccomp", "raw.lxc", "security.syscalls.deny_default",
                  "security.syscalls.deny_compat", "security.syscalls.allow", "security.syscalls.deny")


@dataclass(frozen=True)
class Distro:
    id: str
    version: str
    codename: str

    @property
    def label(self) -> str:
        return f"{'Ubuntu' if self.id == 'ubuntu' else self.id.capitalize()} {self.version}"


@dataclass(frozen=True)
class Settings:
    user: str
    port: int
    listen: str  # "lan" or an IPv4 address (127.0.0.1: only reachable through a tunnel)
    firefox_source: str
    stage: str  # "all", or "packages" (install only: for a golden container/image)

    @property
    def xrdp_port(self) -> str:
        """xrdp.ini [Globals] port=: all addresses, loopback (``tcp://.:PORT``) or one address."""
        if self.listen == "lan":
            return str(self.port)
        if self.listen == "127.0.0.1":
            return f"tcp://.:{self.port}"
        return f"tcp://{self.listen}:{self.port}"

    @property
    def firefox_package(self) -> str:
        return "firefox" if self.firefox_source == "mozilla" else "firefox-esr"


def parse_os_release(text: str) -> Distro:
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"').strip("'")
    return Distro(values.get("ID", "").lower(), values.get("VERSION_ID", ""), values.get("VERSION_CODENAME", ""))


def check_distro(distro: Distro, firefox_source: str, where: str) -> None:
    """Debian 12 and Ubuntu 24.04; Ubuntu needs Mozilla's repository (its own firefox is a snap stub)."""
    if distro.id == "debian" and distro.version == "12":
        return
    if distro.id == "ubuntu":
        try:
            major = int(distro.version.split(".")[0])
        except ValueError:
            major = 0
        if major < 22:
            raise BadInput(f"{where}: Ubuntu {distro.version or '?'} ({distro.codename or '?'}) is not supported by "
                           "Mozilla's apt repository (Ubuntu 22.04 or later); use an Ubuntu 24.04 guest")
        if distro.version != "24.04":
            raise BadInput(f"{where}: {distro.label} is not a release this deploy supports; use Debian 12 or "
                           "Ubuntu 24.04")
        if firefox_source != "mozilla":
            raise BadInput(f"{where}: desktop_firefox_source={firefox_source}: Ubuntu has no firefox-esr (and its "
                           "firefox is a snap stub that fails in an unprivileged container); use mozilla")
        return
    shown = distro.label if distro.id else "an unknown distribution (no /etc/os-release)"
    raise BadInput(f"{where}: {shown} is not a release this deploy supports; use Debian 12 or Ubuntu 24.04")


def packages(distro_id: str, firefox_source: str) -> list[str]:
    """Everything the desktop installs (without recommends), in install order."""
    firefox = "firefox" if firefox_source == "mozilla" else "firefox-esr"
    pre = list(MOZILLA_PREREQUISITES) if firefox_source == "mozilla" else []
    return [*pre, *BASE_PACKAGES, firefox]


def recipe_digest(distro_id: str, firefox_source: str, extra: str = "") -> str:
    """Names a cached install: the same packages on the same base give the same digest."""
    blob = repr((packages(distro_id, firefox_source), extra)).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def parse_settings(data: Mapping[str, Any], where: str) -> Settings:
    """The ``desktop_*`` host data, checked; each refusal is one line naming the key and the fix."""
    try:
        user = service_user(data.get("desktop_user") or DEFAULT_USER)
    except ValueError as error:
        raise BadInput(f"{where}: desktop_user {error}") from None
    raw_port = data.get("desktop_port")
    raw_port = DEFAULT_PORT if raw_port is None else raw_port
    try:
        port = int(str(raw_port).strip())
    except ValueError:
        port = 0
    if not 1 <= port <= 65535 or port == SESMAN_PORT:
        raise BadInput(f"{where}: desktop_port {raw_port!r} must be a TCP port 1-65535 other than sesman's "
                       f"{SESMAN_PORT}")
    listen = str(data.get("desktop_listen") or "lan").strip().lower()
    if listen not in ("lan", "localhost"):
        try:
            address = ipaddress.IPv4Address(listen)
        except ValueError:
            raise BadInput(f"{where}: desktop_listen {listen!r} must be lan, 127.0.0.1 or one IPv4 address of the "
                           "guest") from None
        listen = "lan" if address.is_unspecified else str(address)
    listen = "127.0.0.1" if listen == "localhost" else listen
    source = str(data.get("desktop_firefox_source") or "mozilla").strip().lower()
    if source not in FIREFOX_SOURCES:
        raise BadInput(f"{where}: desktop_firefox_source {source!r} must be one of {', '.join(FIREFOX_SOURCES)}")
    stage = str(data.get("desktop_stage") or "all").strip().lower()
    if stage not in ("all", "packages"):
        raise BadInput(f"{where}: desktop_stage {stage!r} must be all or packages")
    return Settings(user, port, listen, source, stage)


def check_guest_data(guest: Mapping[str, Any] | None, where: str) -> None:
    """The inventory's ``guest`` dict for this host (guest model): unprivileged, and no confinement downgrade."""
    if guest is None:
        return
    from labwright.guests.model import spec_from_data

    spec = spec_from_data(where, guest, source=where)
    if not spec.unprivileged:
        raise BadInput(f"{spec.where}: a desktop guest must be unprivileged; remove `unprivileged: false` (field "
                       "note 003's browser box runs unprivileged, and Firefox needs nothing more)")
    for key, value in spec.lxd_config:
        if key in DOWNGRADE_KEYS or key.startswith("raw."):
            if key == "security.privileged" and value == "false":
                continue
            raise BadInput(f"{spec.where}: lxd_config {key} loosens the container's AppArmor/seccomp confinement; "
                           "a desktop guest keeps it (use Firefox, not Chrome); remove the key")


def check_confinement(uid_map: str, seccomp: str, apparmor_enabled: bool, apparmor_label: str, where: str) -> None:
    """Facts read inside the guest: an identity uid map means privileged; Seccomp 0 means the filter was dropped."""
    rows = [line.split() for line in uid_map.strip().splitlines() if line.strip()]
    if any(len(r) == 3 and r[0] == "0" and r[1] == "0" for r in rows):
        raise BadInput(f"{where}: the guest is a privileged container (root is the host's root); recreate it "
                       "unprivileged (`unprivileged: true` in its guest data, Proxmox `--unprivileged 1`)")
    if seccomp.strip() == "0":
        raise BadInput(f"{where}: the guest runs without a seccomp filter (raw.seccomp / lxc.seccomp.profile "
                       "cleared); restore the default confinement, a desktop guest does not need it loosened")
    if apparmor_enabled and apparmor_label.strip().startswith("unconfined"):
        raise BadInput(f"{where}: the guest's AppArmor profile is unconfined; restore the default profile "
                       "(remove lxc.apparmor.profile / raw.apparmor), Firefox needs no downgrade")


def check_password(value: str | None, where: str) -> str | None:
    """None: none given (generate one). An empty or unusable one is refused."""
    if value is None:
        return None
    if not value:
        raise BadInput(f"{where}: ${PASSWORD_ENV} is set but empty; set a password or unset it to have one generated")
    if "\n" in value or "\0" in value:
        raise BadInput(f"{where}: ${PASSWORD_ENV} contains a newline or NUL; use a single-line password")
    return value
