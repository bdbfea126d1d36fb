"""testinfra checks of what deploys/base.py promises, on a deployed host.

    labwright verify base --hosts=@lxd/lw-node1
    labwright verify base --hosts=@ssh/labadmin@ADDR --ssh-identity-file=KEY --sudo

Expected values: see labwright/verify/conftest.py (--base-admin-user, --base-timezone, --base-locale,
--base-unattended-upgrades, --base-admin-key-file). The checks read the state the system actually
uses (sshd -T, apt-config, sudo -n) rather than the files the deploy wrote, so they also catch a
setting that some other file overrides.
"""

from __future__ import annotations

import re

import pytest

# Option -> accepted values in `sshd -T` output; PermitRootLogin is the expected one (--base-permit-root-login).
SSHD_HARDENING = {
    "pubkeyauthentication": {"yes"},
    "passwordauthentication": {"no"},
    "kbdinteractiveauthentication": {"no"},
    "permitemptypasswords": {"no"},
    "x11forwarding": {"no"},
    "maxauthtries": {"3"},
    "logingracetime": {"30"},
}


def normalized_locale(name: str) -> str:
    """glibc's spelling: en_US.UTF-8 is listed by `locale -a` as en_US.utf8."""
    lang, _, codeset = name.partition(".")
    return f"{lang}.{re.sub(r'[^a-z0-9]', '', codeset.lower())}" if codeset else lang


@pytest.fixture(scope="module", autouse=True)
def as_root(host):
    # sshd -T, visudo -c and runuser need root; say so once instead of failing a dozen checks oddly.
    if host.user().name != "root":
        pytest.fail("the base suite needs root on the host: connect as root or add --sudo", pytrace=False)


# --- timezone --------------------------------------------------------------------------------------
def test_localtime_points_at_the_zone(host, base_expected):
    zone = host.file(f"/usr/share/zoneinfo/{base_expected.timezone}")
    assert zone.exists, f"{base_expected.timezone} is not a zone on this host"
    localtime = host.file("/etc/localtime")
    assert localtime.is_symlink, "/etc/localtime is not a symlink into /usr/share/zoneinfo"
    assert localtime.linked_to == zone.linked_to


def test_etc_timezone_names_the_zone(host, base_expected):
    assert host.file("/etc/timezone").content_string.strip() == base_expected.timezone


def test_timedatectl_reports_the_zone(host, base_expected):
    result = host.run("timedatectl show --property=Timezone --value")
    if result.rc != 0:
        pytest.skip(f"timedatectl not usable here (no systemd?): {result.stderr.strip()}")
    assert result.stdout.strip() == base_expected.timezone


# --- locale ------------------------------------------------------------------------------------------
def test_locale_is_generated(host, base_expected):
    available = {normalized_locale(n) for n in host.check_output("locale -a").split()}
    assert normalized_locale(base_expected.locale) in available


def test_locale_is_the_default(host, base_expected):
    settings = dict(
        line.split("=", 1) for line in host.file("/etc/default/locale").content_string.splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    )
    assert settings.get("LANG", "").strip("\"'") == base_expected.locale
    # A login (pam_env reads /etc/default/locale) gets it, and glibc can load it without complaint.
    login = host.run("su - %s -c 'echo \"$LANG\"; locale 2>&1 >/dev/null'", base_expected.admin_user)
    assert login.rc == 0, login.stderr
    lang, *complaints = login.stdout.splitlines()
    assert lang == base_expected.locale
    assert complaints == []


# --- admin user ---------------------------------------------------------------------------------------
def test_admin_user_exists_in_group_sudo(host, base_expected):
    user = host.user(base_expected.admin_user)
    assert user.exists
    assert "sudo" in user.groups
    assert host.file(user.home).is_directory
    assert host.file(user.home).user == base_expected.admin_user


def test_admin_has_the_lab_key(host, base_expected, admin_public_keys):
    home = host.user(base_expected.admin_user).home
    ssh_dir = host.file(f"{home}/.ssh")
    keys = host.file(f"{home}/.ssh/authorized_keys")
    # sshd (StrictModes) ignores authorized_keys that others can write.
    assert ssh_dir.is_directory and ssh_dir.user == base_expected.admin_user and ssh_dir.mode == 0o700
    assert keys.is_file and keys.user == base_expected.admin_user and keys.mode == 0o600
    installed = {" ".join(line.split()[:2]) for line in keys.content_string.splitlines()}
    missing = [k for k in admin_public_keys if k not in installed]
    assert not missing, f"not in authorized_keys: {missing}"


def test_admin_has_passwordless_sudo(host, base_expected):
    # -n: fail instead of prompting, so a sudo that wants a password is a failure, not a hang.
    result = host.run("runuser -u %s -- sudo -n id -u", base_expected.admin_user)
    assert result.rc == 0, result.stderr
    assert result.stdout.strip() == "0"


def test_sudoers_is_valid(host):
    result = host.run("visudo -c")
    assert result.rc == 0, result.stdout + result.stderr


# --- sshd ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sshd_effective(host) -> dict[str, str]:
    result = host.run("sshd -T")
    assert result.rc == 0, f"sshd -T failed (config invalid?): {result.stderr.strip()}"
    return dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)


@pytest.mark.parametrize("option", sorted(SSHD_HARDENING))
def test_sshd_effective_setting(sshd_effective, option):
    assert sshd_effective.get(option) in SSHD_HARDENING[option]


def test_sshd_effective_permitrootlogin(sshd_effective, base_expected):
    # `sshd -T` is what sshd uses: a file read before labwright's drop-in (sshd keeps an option's first value) shows
    # here. OpenSSH 9.2 (Debian 12) still prints prohibit-password under its old name, without-password.
    got = sshd_effective.get("permitrootlogin", "").replace("without-password", "prohibit-password")
    assert got == base_expected.permit_root_login, f"sshd -T: permitrootlogin {got}"


def test_ssh_service_runs_and_listens(host):
    ssh = host.service("ssh")
    assert ssh.is_running
    assert ssh.is_enabled
    assert host.socket("tcp://22").is_listening


# --- unattended upgrades -------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["APT::Periodic::Unattended-Upgrade", "APT::Periodic::Update-Package-Lists"])
def test_unattended_upgrades_setting(host, base_expected, key):
    # apt-config merges every apt.conf.d file, so this is what apt's daily job will actually see.
    value = host.check_output("apt-config shell V %s", key).partition("=")[2].strip("'")
    assert value == ("1" if base_expected.unattended_upgrades else "0")


def test_unattended_upgrades_package(host, base_expected):
    # "Off" leaves the package in place (20auto-upgrades switches it off); "on" needs it installed.
    installed = host.package("unattended-upgrades").is_installed
    assert installed or not base_expected.unattended_upgrades
