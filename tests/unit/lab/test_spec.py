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
    assert spec.containers[1].data["x"] == 1  # the container's host.data, as a pyinfra run sees it
    assert "x" not in spec.containers[0].data
    assert spec.bridge == "lwbr0" and spec.pool == "labwright"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lab = [\n  '@lxd/a',\n", "line 1: '[' was never closed"),
        ("import nosuchmodule_xyz\nlab = []\n", "ModuleNotFoundError"),
        ("web = ['@lxd/a']\n", "no `lab` group"),
        ("lab = 'x'\n", "no `lab` group"),  # pyinfra ignores a name that is not a list or tuple
        ("lab = ['@lxd/remote:a']\n", "no REMOTE:"),
        ("lab = ['@lxd/']\n", "@lxd needs a container name"),
        ("lab = ['@ssh/a']\n", "must be written @lxd/NAME"),
        ("lab = ['@lxd/1abc']\n", "'1abc' is not a valid container name"),
        ("lab = ['@lxd/bad_name']\n", "'bad_name' is not a valid container name"),
        ("lab = (['@lxd/a'], {'lab_subnet': '10.99.0.0/24'})\n", "must be the bridge's own address"),
        ("lab = (['@lxd/a'], {'lab_subnet': 'ten'})\n", "not an IPv4 address"),
        ("lab = (['@lxd/a'], {'lab_subnet': '10.99.0.1/30'})\n", "/29 or larger"),
        ("lab = (['@lxd/a'], {'lab_bridge': 'br_0'})\n", "lab_bridge"),
        ("lab = (['@lxd/a'], {'lab_subnet': '127.0.0.1/8'})\n", "lab_subnet 127.0.0.1/8 is a loopback network"),
        ("lab = (['@lxd/a'], {'lab_subnet': '169.254.0.1/16'})\n", "is a link-local network"),
        ("lab = (['@lxd/a'], {'lab_subnet': '8.8.8.1/24'})\n", "is not a private network"),
        ("lab = (['@lxd/a'], {'lab_subnet': '10.99.0.255/24'})\n", "must be the bridge's own address"),
        ("lab = (['@lxd/a'], {'lab_bridge': 'labwright-bridge0'})\n",
         "lab_bridge 'labwright-bridge0' is 17 characters; Linux interface names are at most 15"),
        ("lab = (['@lxd/a'], {'lab_cpu': 'abc'})\n", "lab_cpu 'abc' is not a CPU count (2) or CPU set (0-3)"),
        ("lab = (['@lxd/a'], {'lab_cpu': 0})\n", "lab_cpu 0 is not a CPU count"),
        ("lab = (['@lxd/a'], {'lab_cpu': '3-1'})\n", "lab_cpu '3-1': the range 3-1 runs backwards; write 1-3"),
        ("lab = (['@lxd/a'], {'lab_cpu': '0,4-2'})\n", "the range 4-2 runs backwards"),
        ("lab = (['@lxd/a'], {'lab_memroy': '2GiB'})\n", "unknown lab setting lab_memroy (did you mean lab_memory?)"),
        ("lab = (['@lxd/a'], {'lab_memory': 'lots'})\n", "lab_memory 'lots' is not a size"),
        ("lab = (['@lxd/a'], {'lab_memory': '2GB!'})\n", "lab_memory '2GB!' is not a size"),
        ("lab = (['@lxd/a'], {'lab_memory': '1MiB'})\n", "under 64MiB"),
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
    with pytest.raises(BadInput, match="no such file; pass an existing file"):
        load_lab_spec(tmp_path / "nope.py")


def test_a_host_listed_twice_is_one_container_as_in_pyinfra(tmp_path):
    spec = load_lab_spec(write(tmp_path, "lab = ['@lxd/a', '@lxd/a']\n"))
    assert [c.name for c in spec.containers] == ["a"]


def test_the_group_pyinfra_makes_from_the_file_name_is_not_a_lab(tmp_path):
    # pyinfra puts every host of lab.py in a group `lab`; only a `lab` the file defines declares the lab.
    path = tmp_path / "lab.py"
    path.write_text("nodes = ['@lxd/a']\n")
    with pytest.raises(BadInput, match="no `lab` group"):
        load_lab_spec(path)


def test_lab_settings_come_from_group_data_files(tmp_path):
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "all.py").write_text("lab_memory = '3GiB'\nlab_cpu = '3'\n")
    (tmp_path / "group_data" / "lab.py").write_text("lab_name = 'fromfile'\nlab_cpu = '5'\n")
    spec = load_lab_spec(write(tmp_path, "lab = (['@lxd/a'], {'lab_subnet': '10.99.7.1/24'})\n"))
    assert (spec.name, spec.cpu, spec.memory, str(spec.subnet)) == ("fromfile", "5", "3GiB", "10.99.7.1/24")
    assert spec.containers[0].data["lab_name"] == "fromfile"


def test_group_data_overrides_defaults():
    spec = spec_from_group(["@lxd/x"], {"lab_name": "t", "lab_subnet": "10.99.5.1/24", "lab_memory": "1GiB"})
    assert (spec.name, str(spec.subnet.network), spec.memory, spec.cpu) == ("t", "10.99.5.0/24", "1GiB", "2")


@pytest.mark.parametrize(("cpu", "memory"), [("2", "2GiB"), (4, "512MiB"), ("0-3", "50%"), ("0,2,4-5", "1073741824")])
def test_lxd_forms_of_cpu_and_memory_are_accepted(tmp_path, cpu, memory):
    spec = load_lab_spec(write(tmp_path, f"lab = (['@lxd/a'], {{'lab_cpu': {cpu!r}, 'lab_memory': {memory!r}}})\n"))
    assert (spec.cpu, spec.memory) == (str(cpu), memory)


@pytest.mark.parametrize("host_data", ["{'lab_cpu': -4}", "{'lab_memory': 'lots'}", "{'lab_subnet': '10.98.0.1/24'}"])
def test_a_lab_setting_given_to_one_host_is_refused_before_the_daemon(tmp_path, host_data):
    """lab_* belong to the lab group; one host's own value was ignored without a word (sweep at 2b91fd1)."""
    path = tmp_path / "lab.py"
    path.write_text(f"lab = ([('@lxd/lw-a', {host_data})], {{'lab_name': 'x'}})\n")
    key = host_data.split("'")[1]
    with pytest.raises(BadInput, match=f"{key} is given to the host @lxd/lw-a, but lab_\\* are settings of the whole"):
        load_lab_spec(path)


def test_the_groups_own_settings_seen_through_a_host_pass(tmp_path):
    path = tmp_path / "lab.py"
    path.write_text("lab = ([('@lxd/lw-a', {'guest_note': 1}), '@lxd/lw-b'], {'lab_name': 'x', 'lab_cpu': '1'})\n")
    assert load_lab_spec(path).cpu == "1"
