"""``lab_backend``: which daemon a lab lives on (labwright.lab.backend), read from the inventory and from what is
installed here, never from whichever binary happens to be found first; and each bad input as one line.

"Installed" is looked up for real on PATH: each test puts the daemons' commands it wants (empty scripts) in a bin
directory of its own and points PATH there, with the Incus daemon looked for on PATH too (``incusd``) instead of
Debian's /usr/libexec/incus, so the answer does not depend on what this machine has.
"""

from __future__ import annotations

import dataclasses

import pytest

from labwright.errors import BadInput
from labwright.lab import backend as lab_backend
from labwright.lab.daemon import INCUS, LXD
from labwright.lab.spec import spec_from_group


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """installed("lxd", "incus"): only those daemons (command and client) are on PATH."""
    incus = dataclasses.replace(INCUS, daemon_paths=("incusd",))
    monkeypatch.setattr(lab_backend, "INCUS", incus)
    monkeypatch.setattr(lab_backend, "BACKENDS", {"lxd": LXD, "incus": incus})
    monkeypatch.setattr(lab_backend, "packaged_backend", lambda: LXD)  # apt's answer: tested below on its own

    def make(*names: str) -> None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        commands = {"lxd": ("lxd", "lxc"), "incus": ("incusd", "incus")}
        for name in names:
            for command in commands[name]:
                (bin_dir / command).write_text("#!/bin/sh\n")
                (bin_dir / command).chmod(0o755)
        monkeypatch.setenv("PATH", str(bin_dir))

    return make


def spec(hosts=("@lxd/a",), **settings):
    return spec_from_group(list(hosts), settings, source="inv.py")


@pytest.mark.parametrize(("have", "hosts", "settings", "chosen", "why"), [
    (("lxd",), ["@lxd/a"], {}, "lxd", "LXD is installed"),
    (("lxd", "incus"), ["@lxd/a"], {}, "lxd", "set lab_backend = 'incus' for that one"),
    (("incus",), ["@lxd/a"], {}, "incus", "Incus is installed, LXD is not"),
    (("lxd", "incus"), ["@incus/a"], {}, "incus", "its hosts are @incus/NAME"),
    (("lxd", "incus"), ["@incus/a"], {"lab_backend": "incus"}, "incus", "lab_backend = 'incus'"),
    (("lxd", "incus"), [], {"lab_backend": "incus"}, "incus", "lab_backend = 'incus'"),
    ((), ["@lxd/a"], {}, "lxd", "neither is installed; this distribution packages LXD"),
])
def test_the_daemon_is_chosen_by_the_inventory_then_by_what_is_installed(installed, have, hosts, settings, chosen,
                                                                          why):
    installed(*have)
    backend, reason = lab_backend.choose_backend(spec(hosts, **settings))
    assert backend.name == chosen
    assert why in reason


@pytest.mark.parametrize(("have", "hosts", "settings", "message"), [
    (("lxd",), ["@incus/a"], {"lab_backend": "incus"},
     "inv.py: lab_backend incus: Incus is not installed here (no incus and incusd); install it with scripts/setup or "
     "`sudo apt-get install incus-base`, or set lab_backend = 'lxd' (installed here)"),
    ((), ["@lxd/a"], {"lab_backend": "lxd"},
     "inv.py: lab_backend lxd: LXD is not installed here (no lxc and lxd); install it with scripts/setup or "
     "`sudo apt-get install lxd`"),
    (("lxd",), ["@incus/a"], {}, "the lab's hosts are written @incus/NAME but Incus is not installed here"),
])
def test_a_daemon_that_is_not_installed_is_refused_in_one_line(installed, have, hosts, settings, message):
    installed(*have)
    with pytest.raises(BadInput) as caught:
        lab_backend.choose_backend(spec(hosts, **settings))
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("hosts", "settings", "message"), [
    (["@lxd/a"], {"lab_backend": "podman"}, "lab_backend 'podman' is not one of incus, lxd, auto"),
    (["@lxd/a"], {"lab_backend": True}, "lab_backend True is not one of"),
    (["@lxd/a"], {"lab_backend": "incus"}, "lab host '@lxd/a' is reached through lxd but lab_backend is incus; "
                                           "write it @incus/a"),
    (["@incus/a"], {"lab_backend": "lxd"}, "write it @lxd/a"),
    (["@lxd/a", "@incus/b"], {}, "the lab's hosts mix @lxd/ and @incus/"),
    (["@incus/r:a"], {}, "must be a container of this machine's daemon, written @incus/NAME (no REMOTE:)"),
    (["@lxd/a"], {"lab_backnd": "incus"}, "unknown lab setting lab_backnd (did you mean lab_backend?)"),
])
def test_bad_lab_backend_settings_are_one_line(hosts, settings, message):
    with pytest.raises(BadInput) as caught:
        spec(hosts, **settings)
    assert message in str(caught.value) and str(caught.value).startswith("inv.py: ")


def test_the_backend_is_read_from_the_inventory(tmp_path):
    from labwright.lab.spec import load_lab_spec

    path = tmp_path / "inv.py"
    path.write_text("lab = (['@incus/n1'], {'lab_backend': 'Incus', 'lab_bridge': 'lwibr0'})\n")
    read = load_lab_spec(path)
    assert (read.backend, read.host_prefix, [c.name for c in read.containers]) == ("incus", "incus", ["n1"])
    assert spec().backend == "auto" and spec().host_prefix == "lxd"


def test_the_distributions_daemon_follows_apt(tmp_path, monkeypatch):
    """Neither installed: LXD where apt has a deb of it (Debian 12, 13), Incus where there is none (Debian 14) or only
    the snap wrapper (Ubuntu 24.04's lxd deb Depends on snapd), as scripts/setup decides."""
    fake = tmp_path / "apt-cache"
    for answer, expected in (("Package: lxd\nDepends: liblxc1, lxcfs\n", "lxd"),
                             ("Package: lxd\nDepends: debconf, snapd\n", "incus"), ("", "incus")):
        fake.write_text(f"#!/bin/sh\nprintf '{answer}'\n" + ("" if answer else "exit 100\n"))
        fake.chmod(0o755)
        assert lab_backend.packaged_backend(str(fake)).name == expected


def test_a_bridge_that_is_already_an_interface_here_is_refused(tmp_path, monkeypatch):
    """Another daemon's bridge of the same name (the other daemon not answering, so only the kernel knows it)."""
    monkeypatch.setattr(lab_backend, "_networks_of", lambda backend: [])
    (tmp_path / "lwbr0").mkdir()
    with pytest.raises(BadInput, match=r"inv.py: lab_bridge lwbr0 is already an interface on this host that Incus "
                                       r"did not make .*lab_bridge = 'lwibr0' and lab_subnet = '10.99.64.1/24'"):
        lab_backend.check_apart(spec(["@incus/a"]), INCUS, sys_net=str(tmp_path))
    lab_backend.check_apart(spec(["@incus/a"], lab_bridge="lwibr0"), INCUS, sys_net=str(tmp_path))


def test_the_other_daemons_bridge_and_subnet_are_refused(monkeypatch, tmp_path):
    theirs = [{"name": "lwbr0", "managed": True, "config": {"ipv4.address": "10.99.0.1/24"}},
              {"name": "eth0", "managed": False, "config": {}}]
    monkeypatch.setattr(lab_backend, "_networks_of", lambda backend: theirs if backend is LXD else [])
    with pytest.raises(BadInput, match="lab_bridge lwbr0 is already LXD's bridge \\(10.99.0.1/24\\); Incus and LXD "
                                       "each need their own"):
        lab_backend.check_apart(spec(["@incus/a"], lab_subnet="10.99.70.1/24"), INCUS, sys_net=str(tmp_path))
    with pytest.raises(BadInput, match="lab_subnet 10.99.0.0/25 overlaps LXD's bridge lwbr0 \\(10.99.0.1/24\\); "
                                       "give this Incus lab a free subnet"):
        lab_backend.check_apart(spec(["@incus/a"], lab_bridge="lwibr0", lab_subnet="10.99.0.1/25"), INCUS,
                                sys_net=str(tmp_path))
    # An interface the other daemon merely sees (not its own) and a free subnet pass.
    lab_backend.check_apart(spec(["@incus/a"], lab_bridge="eth0x", lab_subnet="10.99.70.1/24"), INCUS,
                            sys_net=str(tmp_path))
