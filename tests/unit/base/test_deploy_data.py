"""labwright.base.deploy_data: the base deploy's data rules and rendered files, without a host."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyinfra.api.exceptions import DeployError

from labwright.base.deploy_data import SSHD_DROPIN, has_usable_password, locale_key, settings_from, sshd_check

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGk0dW0gdGVzdCBrZXkgb25seQ me@lab"


@pytest.fixture
def pub(tmp_path: Path) -> Path:
    path = tmp_path / "id.pub"
    path.write_text(f"# the lab key\n{KEY}\n")
    return path


def test_defaults(pub):
    s = settings_from({"admin_ssh_public_key_file": str(pub)})
    assert (s.admin_user, s.timezone, s.locale, s.unattended) == ("labadmin", "Etc/UTC", "en_US.UTF-8", True)
    assert s.admin_keys == [KEY] and "unattended-upgrades" in s.packages
    assert s.zone_file == "/usr/share/zoneinfo/Etc/UTC" and s.locale_pattern == r"en_US\.UTF-8"
    # Security updates are on by default (Debian's own default with unattended-upgrades installed).
    assert 'APT::Periodic::Unattended-Upgrade "1";' in s.render_auto_upgrades()
    assert 'APT::Periodic::Update-Package-Lists "1";' in s.render_auto_upgrades()
    assert "labadmin" in s.render_sudoers()


@pytest.mark.parametrize("off", [False, "false", "no", "off", "0", 0])
def test_security_updates_are_off_only_when_the_data_says_so(pub, off):
    s = settings_from({"admin_ssh_public_key_file": str(pub), "unattended_upgrades": off})
    assert not s.unattended and "unattended-upgrades" not in s.packages
    assert 'APT::Periodic::Unattended-Upgrade "0";' in s.render_auto_upgrades()
    # An absent key and an explicit None (an inventory's "unset") keep the default: on.
    assert settings_from({"admin_ssh_public_key_file": str(pub), "unattended_upgrades": None}).unattended


def test_unattended_and_extra_sshd_lines(pub):
    s = settings_from({"admin_ssh_public_key_file": str(pub), "unattended_upgrades": "yes",
                       "sshd_extra_config": "MaxSessions 4\n\n  AllowTcpForwarding no "})
    assert s.unattended and "unattended-upgrades" in s.packages
    assert s.sshd_extra == ["MaxSessions 4", "AllowTcpForwarding no"]
    assert "MaxSessions 4\n" in s.render_sshd_dropin()


@pytest.mark.parametrize(("more", "key", "words"), [
    ({"admin_user": "root"}, "admin_user", "not a valid name"),
    ({"timezone": "../etc"}, "timezone", "not a zone name"),
    ({"locale": "en US"}, "locale", "not a locale name"),
    ({"unattended_upgrades": "sometimes"}, "unattended_upgrades", "not a boolean"),
    ({"sshd_extra_config": [1]}, "sshd_extra_config", "list of sshd_config lines"),
    # sweep at 2b91fd1: a Match block in the drop-in swallowed the main file's later lines; a break inside an item
    ({"sshd_extra_config": ["Match all", "PasswordAuthentication yes"]}, "sshd_extra_config", "a Match line here"),
    ({"sshd_extra_config": "match User x\nPermitRootLogin yes"}, "sshd_extra_config", "a match line here"),
    ({"sshd_extra_config": ["Include /tmp/x.conf"]}, "sshd_extra_config", "an Include line"),
    ({"sshd_extra_config": ["MaxSessions 4\nPermitRootLogin yes"]}, "sshd_extra_config", "line break"),
    ({"admin_user": "nobody"}, "admin_user", "the system already has"),
    ({"sshd_permit_root_login": "yes"}, "sshd_permit_root_login", "not one of no, prohibit-password"),
    ({"sshd_permit_root_login": "no;reboot"}, "sshd_permit_root_login", "not one of"),
    ({"admin_ssh_public_key_file": "/nonexistent.pub"}, "admin_ssh_public_key_file", "does not exist"),
])
def test_refusals_name_the_key(pub, more, key, words):
    with pytest.raises(DeployError) as error:
        settings_from({"admin_ssh_public_key_file": str(pub), **more})
    assert str(error.value).startswith(f"{key}: ") and words in str(error.value)


def test_a_private_key_is_refused(tmp_path):
    private = tmp_path / "id"
    private.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nxx\n")
    with pytest.raises(DeployError, match="is a private key; give the .pub file"):
        settings_from({"admin_ssh_public_key_file": str(private)})


@pytest.mark.parametrize(("name", "key"), [("en_US.UTF-8", "en_US.utf8"), ("en_US.utf8", "en_US.utf8"),
                                           ("C", "C"), ("de_DE.ISO-8859-1", "de_DE.iso88591")])
def test_locale_key_compares_as_glibc(name, key):
    assert locale_key(name) == key


def test_sshd_check_tests_a_copy_with_the_candidate():
    check = sshd_check(SSHD_DROPIN)
    assert '"$d/conf.d/"00-labwright.conf' in check and "sshd -t -f" in check and "{}" in check


def test_root_logins_are_off_unless_the_data_keeps_root_keys_on_purpose(pub):
    s = settings_from({"admin_ssh_public_key_file": str(pub)})
    assert s.permit_root_login == "no" and "\nPermitRootLogin no\n" in s.render_sshd_dropin()
    assert s.sshd_effective["permitrootlogin"] == "no" and s.sshd_effective["passwordauthentication"] == "no"
    for spelling in ("prohibit-password", "without-password", " Prohibit-Password "):
        kept = settings_from({"admin_ssh_public_key_file": str(pub), "sshd_permit_root_login": spelling})
        assert kept.permit_root_login == "prohibit-password"
        assert "\nPermitRootLogin prohibit-password\n" in kept.render_sshd_dropin()
    # the drop-in is read before cloud-init's 50-cloud-init.conf (sshd keeps the first value of an option)
    assert SSHD_DROPIN == "/etc/ssh/sshd_config.d/00-labwright.conf" and "00-labwright.conf" < "50-cloud-init.conf"


def test_sudo_is_passwordless_unless_the_data_asks_for_the_password(pub):
    s = settings_from({"admin_ssh_public_key_file": str(pub)})
    assert s.sudo_nopasswd and "\nlabadmin ALL=(ALL:ALL) NOPASSWD: ALL\n" in s.render_sudoers()
    asked = settings_from({"admin_ssh_public_key_file": str(pub), "admin_sudo_nopasswd": "false"})
    assert not asked.sudo_nopasswd and "NOPASSWD" not in asked.render_sudoers()
    assert "\nlabadmin ALL=(ALL:ALL) ALL\n" in asked.render_sudoers()
    # only a password someone can type counts: not locked (!), not * (no login), not empty
    assert [has_usable_password(f) for f in ("$6$salt$hash", "!$6$salt$hash", "!", "*", "", None)] == [
        True, False, False, False, False, False]


@pytest.mark.parametrize(("more", "line"), [
    ({"admin_sudo_nopasswd": "maybe"}, "admin_sudo_nopasswd: 'maybe' is not a boolean"),
    ({"sshd_extra_config": 5}, "sshd_extra_config: must be a list of sshd_config lines"),
    ({"admin_user": "Admin"}, "admin_user: 'Admin' is not a user name"),
])
def test_the_schema_refuses_in_one_line(pub, more, line):
    with pytest.raises(DeployError) as error:
        settings_from({"admin_ssh_public_key_file": str(pub), **more})
    assert str(error.value).startswith(line) and "\n" not in str(error.value)
