"""The desktop deploy's refusals and parsers (pure; the real deploy: tests/integration/test_desktop_deploy.py)."""

from __future__ import annotations

import pytest

from labwright.desktop import password
from labwright.desktop.checks import policy_origins
from labwright.desktop.recipe import (
    check_confinement,
    check_distro,
    check_guest_data,
    check_password,
    packages,
    parse_os_release,
    parse_settings,
    recipe_digest,
)
from labwright.errors import BadInput
from labwright.facts.desktop import parse_ini_section

DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n'
NOBLE = 'ID=ubuntu\nVERSION_ID="24.04"\nVERSION_CODENAME=noble\n'
FOCAL = 'ID=ubuntu\nVERSION_ID="20.04"\nVERSION_CODENAME=focal\n'


def test_settings_defaults_and_listen_forms():
    s = parse_settings({}, "h")
    assert (s.user, s.port, s.listen, s.firefox_source, s.stage) == ("desk", 3389, "lan", "mozilla", "all")
    assert s.xrdp_port == "3389" and s.firefox_package == "firefox"
    assert parse_settings({"desktop_listen": "127.0.0.1"}, "h").xrdp_port == "tcp://.:3389"
    assert parse_settings({"desktop_listen": "localhost", "desktop_port": "3390"}, "h").xrdp_port == "tcp://.:3390"
    assert parse_settings({"desktop_listen": "10.99.9.7"}, "h").xrdp_port == "tcp://10.99.9.7:3389"
    assert parse_settings({"desktop_listen": "0.0.0.0"}, "h").listen == "lan"
    assert parse_settings({"desktop_firefox_source": "debian-esr"}, "h").firefox_package == "firefox-esr"


@pytest.mark.parametrize(("data", "words"), [
    ({"desktop_user": "root"}, "desktop_user 'root'"),
    ({"desktop_user": "Bad User"}, "desktop_user"),
    ({"desktop_port": "70000"}, "desktop_port '70000'"),
    ({"desktop_port": 3350}, "other than sesman's 3350"),
    ({"desktop_listen": "everywhere"}, "desktop_listen 'everywhere'"),
    ({"desktop_firefox_source": "snap"}, "mozilla, debian-esr"),
    ({"desktop_stage": "half"}, "desktop_stage"),
])
def test_bad_settings_are_one_line(data, words):
    with pytest.raises(BadInput) as err:
        parse_settings(data, "@lxd/d1")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_distros():
    check_distro(parse_os_release(DEBIAN), "debian-esr", "h")
    check_distro(parse_os_release(DEBIAN), "mozilla", "h")
    check_distro(parse_os_release(NOBLE), "mozilla", "h")
    with pytest.raises(BadInput, match="Ubuntu has no firefox-esr"):
        check_distro(parse_os_release(NOBLE), "debian-esr", "h")
    with pytest.raises(BadInput, match=r"Ubuntu 20.04 \(focal\) is not supported by Mozilla's apt repository"):
        check_distro(parse_os_release(FOCAL), "mozilla", "h")
    with pytest.raises(BadInput, match="Debian 11 is not a release"):
        check_distro(parse_os_release("ID=debian\nVERSION_ID=11\n"), "mozilla", "h")
    with pytest.raises(BadInput, match="unknown distribution"):
        check_distro(parse_os_release(""), "mozilla", "h")


def test_packages_and_digest():
    esr = packages("debian", "debian-esr")
    moz = packages("debian", "mozilla")
    assert "firefox-esr" in esr and "firefox" not in esr and "curl" not in esr
    assert moz[:3] == ["ca-certificates", "curl", "gnupg"] and moz[-1] == "firefox"
    assert {"xrdp", "xorgxrdp", "mate-desktop-environment-core"} <= set(esr)
    assert recipe_digest("debian", "debian-esr") != recipe_digest("debian", "mozilla")
    assert recipe_digest("debian", "debian-esr", "base1") != recipe_digest("debian", "debian-esr", "base2")


def test_guest_data_refusals():
    check_guest_data(None, "h")
    check_guest_data({"backend": "lxd", "features": {"nesting": True}}, "@lxd/d1")
    with pytest.raises(BadInput, match="must be unprivileged"):
        check_guest_data({"backend": "lxd", "unprivileged": False}, "@lxd/d1")
    for key in ("raw.apparmor", "raw.lxc", "raw.seccomp", "security.syscalls.deny_default"):
        with pytest.raises(BadInput, match=f"lxd_config {key} loosens"):
            check_guest_data({"backend": "lxd", "lxd_config": {key: "x"}}, "@lxd/d1")


def test_confinement_facts():
    check_confinement("0 100000 65536\n", "2", False, "", "h")
    with pytest.raises(BadInput, match="privileged container"):
        check_confinement("         0          0 4294967295\n", "2", False, "", "h")
    with pytest.raises(BadInput, match="without a seccomp filter"):
        check_confinement("0 100000 65536\n", "0", False, "", "h")
    with pytest.raises(BadInput, match="AppArmor profile is unconfined"):
        check_confinement("0 100000 65536\n", "2", True, "unconfined", "h")
    check_confinement("0 100000 65536\n", "2", True, "lxc-desk_</var/lib/lxd> (enforce)", "h")


def test_password_rules_and_hash_round_trip():
    assert check_password(None, "h") is None
    with pytest.raises(BadInput, match="LABWRIGHT_DESKTOP_PASSWORD is set but empty"):
        check_password("", "h")
    with pytest.raises(BadInput, match="newline"):
        check_password("a\nb", "h")
    generated = password.generate()
    assert len(generated) == 16 and generated.isalnum() and generated != password.generate()
    hashed = password.sha512_crypt("s3cret pass")
    assert hashed.startswith("$6$") and password.matches("s3cret pass", hashed)
    assert not password.matches("wrong", hashed)
    assert not password.matches("s3cret pass", "$y$j9T$abc$def")  # yescrypt: unknown here, so "set it"


def test_ini_globals_only():
    ini = "[Globals]\n; comment\nport=3389\nsecurity_layer=negotiate\n[Xorg]\nport=-1\n"
    assert parse_ini_section(ini.splitlines(), "Globals") == {"port": "3389", "security_layer": "negotiate"}
    assert parse_ini_section(ini.splitlines(), "Xorg") == {"port": "-1"}


def test_apt_policy_origins():
    esr = """firefox-esr:
  Installed: 140.12.0esr-1~deb12u1
  Candidate: 140.12.0esr-1~deb12u1
  Version table:
 *** 140.12.0esr-1~deb12u1 500
        500 http://deb.debian.org/debian bookworm/main amd64 Packages
        100 /var/lib/dpkg/status
     115.0esr-1 500
        500 http://other.example/debian bookworm/main amd64 Packages
"""
    assert policy_origins(esr) == ("140.12.0esr-1~deb12u1", 500, ["http://deb.debian.org/debian"])
    moz = """firefox:
  Installed: 146.0~build1
  Candidate: 146.0~build1
  Version table:
 *** 146.0~build1 1000
       1000 https://packages.mozilla.org/apt mozilla/main amd64 Packages
        100 /var/lib/dpkg/status
     1:1snap1-0ubuntu5 500
        500 http://archive.ubuntu.com/ubuntu noble/main amd64 Packages
"""
    assert policy_origins(moz) == ("146.0~build1", 1000, ["https://packages.mozilla.org/apt"])
    assert policy_origins("firefox:\n  Installed: (none)\n  Candidate: 1\n")[0] is None
