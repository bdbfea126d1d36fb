"""--data KEY=VALUE for `labwright bios`: typed by the connector's own data_cls, unknown keys and connectors refused,
host names DNS can hold; and a manifest that is not UTF-8 text. One BadInput line each, before any connection."""

from __future__ import annotations

import pytest

from labwright.bios import manifest
from labwright.errors import BadInput
from labwright.hosts.host_data import check_hostname, parse_host_data


def test_values_get_the_connector_s_types():
    data = parse_host_data("node1.example", ["ssh_port=2222", "ssh_user=root", "ssh_look_for_keys=false",
                                             "ssh_connect_retry_min_delay=0.5",
                                             'ssh_paramiko_connect_kwargs={"timeout": 5}'])
    assert data == {"ssh_port": 2222, "ssh_user": "root", "ssh_look_for_keys": False,
                    "ssh_connect_retry_min_delay": 0.5, "ssh_paramiko_connect_kwargs": {"timeout": 5}}
    assert parse_host_data("@lxd/node1", ["lxd_remote=lab"]) == {"lxd_remote": "lab"}
    assert parse_host_data("@pct/pve1/101", ["pct_vmid=101", "ssh_port=22"]) == {"pct_vmid": 101, "ssh_port": 22}


@pytest.mark.parametrize(
    ("target", "items", "message"),
    [("h.example", ["ssh_port=22x"], "--data 'ssh_port=22x': ssh_port is a whole number"),
     ("h.example", ["ssh_port=0"], "ssh_port is a TCP port, 1 to 65535"),
     ("h.example", ["ssh_port=-1"], "ssh_port is a whole number"),
     ("h.example", ["ssh_allow_agent=perhaps"], "ssh_allow_agent is true or false"),
     ("h.example", ["ssh_connect_retry_max_delay=nan"], "is a number of seconds >= 0"),
     ("h.example", ["ssh_paramiko_connect_kwargs=[1]"], "is a JSON object"),
     ("h.example", ["ssh_user="], "ssh_user is empty"),
     ("h.example", ["ssh_user=a", "ssh_user=b"], "ssh_user is given twice"),
     ("h.example", ["SSH_PORT=22"], "expected KEY=VALUE"),
     ("h.example", ["ssh_prot=22"], "the ssh connector (h.example) has no ssh_prot (did you mean ssh_port?); it "
                                    "reads ssh_allow_agent"),
     ("h.example", ["ssh_hostname=a b"], "--data 'ssh_hostname=a b': ssh_hostname 'a b' is not an IP address"),
     ("h.example", ["ssh_password=a\nb"], "--data ssh_password=...: ssh_password holds a control character"),
     ("@local", ["ssh_port=22"], "the local connector (@local) has no ssh_port; it reads no host data"),
     ("@lxd/x", ["ssh_port=22"], "the lxd connector (@lxd/x) has no ssh_port"),
     ("@nosuch/x", [], "HOST @nosuch/x: no pyinfra connector '@nosuch'"),
     ("n" * 300, [], "not a host name or IP address"),
     ("a..b", [], "not a host name or IP address")],
)
def test_bad_host_data_is_one_line(target, items, message):
    with pytest.raises(BadInput) as caught:
        parse_host_data(target, items)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("host", ["10.99.0.5", "::1", "[fe80::1]", "node-1.lab.example", "localhost", "a" * 63])
def test_real_host_names_and_addresses_pass(host):
    assert check_hostname(host) == host


def test_a_manifest_that_is_not_utf8_is_one_line_naming_it(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b'{"schema": "\xff"}')
    with pytest.raises(BadInput, match=f"{path}: not UTF-8 text"):
        manifest.load(path)
