"""@lxd/@incus/@pct host names and the VMID rule: one parser, used by the connectors, the guest model and the lab."""

from __future__ import annotations

import pytest
from pyinfra.api.exceptions import InventoryError

from labwright.connectors.lxd import IncusConnector, LxdConnector
from labwright.connectors.pct import PctConnector
from labwright.errors import BadInput
from labwright.guests.model import spec_from_data
from labwright.hostnames import (
    VMID_MAX,
    BadHostName,
    LxdName,
    PctName,
    lxd_guest,
    parse_host_name,
)
from labwright.lab.spec import spec_from_group


@pytest.mark.parametrize(("host", "parsed"), [
    ("@lxd/a1", LxdName("lxd", None, "a1")),
    ("@lxd/lab:a1", LxdName("lxd", "lab", "a1")),
    ("@incus/b-2", LxdName("incus", None, "b-2")),
    ("@incus/far:b", LxdName("incus", "far", "b")),
    ("@pct/pve1/101", PctName("pve1", 101)),
    ("@pct/pve1.example.org/999999999", PctName("pve1.example.org", 999_999_999)),
    ("pve1", None), ("@local", None), ("@ssh/x", None), ("@docker/x", None),
])
def test_names(host, parsed):
    assert parse_host_name(host) == parsed
    if parsed is not None:
        assert parsed.host == host


@pytest.mark.parametrize(("host", "fragment"), [
    ("@lxd", "@lxd needs a container name"),
    ("@lxd/", "@lxd needs a container name"),
    ("@lxd/9a", "'9a' is not a valid container name"),
    ("@lxd/remote:", "'' is not a valid container name"),
    ("@incus/a_b", "@incus/a_b: 'a_b' is not a valid container name"),
    ("@pct/pve1", "expected @pct/NODE/VMID"),
    ("@pct/pve1/99", "VMID '99' is not a Proxmox container id (an integer from 100 to 999999999)"),
    ("@pct/pve1/1000000000", "VMID '1000000000'"),
    ("@pct/pve1/+101", "VMID '+101'"),
    ("@pct/a/b/101", "NODE 'a/b' is not a node name"),
    ("@pct/pve 1/101", "NODE 'pve 1'"),
])
def test_bad_names_are_one_line_for_labwright_and_pyinfra(host, fragment):
    with pytest.raises(BadHostName) as info:
        parse_host_name(host)
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert isinstance(info.value, BadInput) and info.value.exit_code == 2
    assert not isinstance(info.value, InventoryError)  # labwright.hostnames stays free of pyinfra (CLI start-up)
    # The connectors raise the same line to pyinfra as its InventoryError, which pyinfra's CLI prints.
    connector, _, target = host.partition("/")
    make_names = {"@lxd": LxdConnector, "@incus": IncusConnector, "@pct": PctConnector}[connector].make_names_data
    with pytest.raises(InventoryError) as raised:
        list(make_names(target or None))
    assert str(raised.value) == str(info.value) and isinstance(raised.value, BadHostName)


def test_the_connectors_use_the_same_parser():
    assert list(LxdConnector.make_names_data("lab:a1")) == \
        [("@lxd/lab:a1", {"lxd_instance": "a1", "lxd_remote": "lab"}, ["@lxd"])]
    assert list(IncusConnector.make_names_data("b")) == \
        [("@incus/b", {"lxd_instance": "b", "lxd_remote": None}, ["@incus"])]
    assert list(PctConnector.make_names_data("pve1/101")) == \
        [("@pct/pve1/101", {"pct_node": "pve1", "pct_vmid": 101}, ["@pct"])]
    for make, target in ((LxdConnector.make_names_data, "9a"), (PctConnector.make_names_data, "pve1/99")):
        with pytest.raises(BadHostName):
            list(make(target))


def test_the_guest_model_and_the_lab_use_the_same_parser():
    with pytest.raises(BadInput, match=r"inv.py: @pct/pve1/99: VMID '99' is not a Proxmox container id"):
        spec_from_data("@pct/pve1/99", {"backend": "proxmox"}, source="inv.py")
    with pytest.raises(BadInput, match=r"inv.py: @lxd/9a: '9a' is not a valid container name"):
        spec_from_group(["@lxd/9a"], {}, source="inv.py")
    spec = spec_from_data("@lxd/far:web", {"backend": "lxd"})
    assert (spec.name, spec.node) == ("web", "far")


PVE = {"backend": "proxmox", "node": "pve1"}


@pytest.mark.parametrize(("value", "expected"), [(100, 100), ("101", 101), (VMID_MAX, VMID_MAX)])
def test_a_guests_vmid_field_has_the_same_range(value, expected):
    assert spec_from_data("web", {**PVE, "vmid": value}).vmid == expected


@pytest.mark.parametrize(("value", "fragment"), [
    (99, "vmid: 99 is outside 100-999999999"), (VMID_MAX + 1, "is outside"), (True, "not a whole number"),
    ("ten", "'ten' is not a whole number between 100 and 999999999"), (1.5, "not a whole number"),
])
def test_bad_vmid_fields(value, fragment):
    with pytest.raises(BadInput, match=fragment):
        spec_from_data("web", {**PVE, "vmid": value})


@pytest.mark.parametrize("host", ["@lxd/$(id)", "@incus/`id`", "@lxd/remote:a;b", "@pct/pve1/$(id)"])
def test_shell_in_a_name_is_one_line_never_run(host, tmp_path):
    """Names from a sweep of bad input: refused by the parser, one line naming the whole host name."""
    from labwright.inventory import load_inventory

    inventory = tmp_path / "inv.py"
    inventory.write_text(f"hosts = [{host!r}]\n")
    with pytest.raises(BadInput) as caught:
        load_inventory(inventory, cwd=tmp_path)
    message = str(caught.value)
    assert message.startswith(f"inventory {inventory}: {host}") and "\n" not in message


def test_an_unknown_connector_is_one_line_naming_the_file(tmp_path):
    from labwright.inventory import load_inventory

    inventory = tmp_path / "inv.py"
    inventory.write_text("hosts = ['@nosuch/x']\n")
    with pytest.raises(BadInput) as caught:
        load_inventory(inventory, cwd=tmp_path)
    assert str(caught.value) == f"inventory {inventory}: Invalid connector: nosuch; fix the host name"


@pytest.mark.parametrize(("given", "flavour", "remote", "instance"), [
    ("llm1", "lxd", None, "llm1"),
    ("lab:llm1", "lxd", "lab", "llm1"),
    ("@lxd/llm1", "lxd", None, "llm1"),
    ("@lxd/lab:llm1", "lxd", "lab", "llm1"),
    ("@incus/llm1", "incus", None, "llm1"),
])
def test_a_guest_is_taken_as_lxc_or_the_inventory_names_it(given, flavour, remote, instance):
    parsed = lxd_guest(given)
    assert (parsed.flavour, parsed.remote, parsed.instance) == (flavour, remote, instance)


@pytest.mark.parametrize("given", ["desk_1", "lab:desk_1", "@lxd/$(id)", "@pct/pve1/120", "@ssh/llm1", "@lxd/", ""])
def test_anything_else_is_one_line_naming_the_forms(given):
    with pytest.raises(BadHostName) as refused:
        lxd_guest(given)
    assert str(refused.value) == (f"guest {given!r} is not an LXD instance name (NAME, REMOTE:NAME or @lxd/NAME); "
                                  "use 1-63 letters, digits and hyphens, starting with a letter")
