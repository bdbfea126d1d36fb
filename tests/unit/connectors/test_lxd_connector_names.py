"""@lxd/@incus host names and stdin handling (pure parts of the connector)."""

from __future__ import annotations

import io

import pytest
from pyinfra.api.exceptions import InventoryError

from labwright.connectors.lxd import IncusConnector, LxdConnector, stdin_bytes


def test_names_with_and_without_remote():
    assert list(LxdConnector.make_names_data("web1")) == [
        ("@lxd/web1", {"lxd_instance": "web1", "lxd_remote": None}, ["@lxd"])
    ]
    assert list(LxdConnector.make_names_data("homelab:gpu-1")) == [
        ("@lxd/homelab:gpu-1", {"lxd_instance": "gpu-1", "lxd_remote": "homelab"}, ["@lxd"])
    ]
    assert list(IncusConnector.make_names_data("d1"))[0][0] == "@incus/d1"


@pytest.mark.parametrize("name", [None, "", "bad_name", "r:-x", "1abc"])
def test_bad_names_raise_inventory_error(name):
    with pytest.raises(InventoryError):
        list(LxdConnector.make_names_data(name))


def test_stdin_forms_match_a_pipe():
    assert stdin_bytes("a") == b"a\n"
    assert stdin_bytes(["a", "b\n"]) == b"a\nb\n"
    assert stdin_bytes(io.StringIO("x\ny")) == b"x\ny\n"
    assert stdin_bytes("ünï") == "ünï\n".encode()
