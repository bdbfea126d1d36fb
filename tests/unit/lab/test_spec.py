"""Reading the lab from an inventory file: the good case and each bad input."""

from __future__ import annotations

import pytest

from labwright.errors import BadInput
from labwright.lab.spec import load_lab_spec, spec_from_group


def write(tmp_path, text: str):
    path = tmp_path / "inv.py"
    path.write_text(text)
    return path


def test_embedded_default_inventory_declares_the_local_lab(repo):
    spec = load_lab_spec(repo / "inventories" / "local.py")
    assert spec.name == "local"
    assert str(spec.subnet) == "10.99.0.1/24"
    assert [c.name for c in spec.containers] == ["lw-node1"]
    assert spec.marker == "labwright lab local"


def test_list_form_and_defaults(tmp_path):
    spec = load_lab_spec(write(tmp_path, 'lab = ["@lxd/a1", ("@lxd/b2", {"x": 1})]\n'))
    assert [c.name for c in spec.containers] == ["a1", "b2"]
    assert spec.containers[1].data == {"x": 1}
    assert spec.bridge == "lwbr0" and spec.pool == "labwright"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lab = [\n  '@lxd/a',\n", "line 1: '[' was never closed"),
        ("import nosuchmodule_xyz\nlab = []\n", "ModuleNotFoundError"),
        ("web = ['@lxd/a']\n", "no `lab` group"),
        ("lab = 'x'\n", "must be a list of hosts"),
        ("lab = ['@ssh/a']\n", "must be written @lxd/NAME"),
        ("lab = ['@lxd/1abc']\n", "'1abc' is not a valid container name"),
        ("lab = ['@lxd/bad_name']\n", "'bad_name' is not a valid container name"),
        ("lab = ['@lxd/a', '@lxd/a']\n", "declared twice"),
        ("lab = (['@lxd/a'], {'lab_subnet': '10.99.0.0/24'})\n", "must be the bridge's own address"),
        ("lab = (['@lxd/a'], {'lab_subnet': 'ten'})\n", "not an IPv4 address"),
        ("lab = (['@lxd/a'], {'lab_subnet': '10.99.0.1/30'})\n", "/29 or larger"),
        ("lab = (['@lxd/a'], {'lab_bridge': 'br_0'})\n", "lab_bridge"),
    ],
)
def test_bad_inventories_are_one_clear_line(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(BadInput) as info:
        load_lab_spec(path)
    text_of_error = str(info.value)
    assert message in text_of_error
    assert str(path) in text_of_error
    assert "\n" not in text_of_error
    assert info.value.exit_code == 2


def test_missing_inventory_file(tmp_path):
    with pytest.raises(BadInput, match="cannot read it"):
        load_lab_spec(tmp_path / "nope.py")


def test_group_data_overrides_defaults():
    spec = spec_from_group(["@lxd/x"], {"lab_name": "t", "lab_subnet": "10.99.5.1/24", "lab_memory": "1GiB"})
    assert (spec.name, str(spec.subnet.network), spec.memory, spec.cpu) == ("t", "10.99.5.0/24", "1GiB", "2")
