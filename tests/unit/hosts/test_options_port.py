"""ssh_port from host data is a TCP port or one line naming the key (was a ValueError/pyinfra type error traceback)."""

from __future__ import annotations

import pytest

from labwright.errors import BadInput
from labwright.hosts.options import endpoint, port_number, ssh_options


@pytest.mark.parametrize("value", ["N", "", "0", "70000", "-1", "22.5", True, None])
def test_bad_ports_are_one_line_naming_the_key(value: object) -> None:
    with pytest.raises(BadInput) as caught:
        port_number("ssh_port", value)
    message = str(caught.value)
    assert message.startswith(f"ssh_port={value!r}: not a TCP port") and "e.g. ssh_port=2222" in message
    assert "\n" not in message


@pytest.mark.parametrize(("value", "port"), [("2222", 2222), (22, 22), (" 65535 ", 65535)])
def test_good_ports(value: object, port: int) -> None:
    assert port_number("ssh_port", value) == port


def test_ssh_options_refuses_a_text_port(tmp_path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("")
    with pytest.raises(BadInput, match=r"^ssh_port='N': not a TCP port"):
        ssh_options({"ssh_port": "N", "ssh_config_file": str(config)}, "node1")
    options = ssh_options({"ssh_port": "2222", "ssh_config_file": str(config)}, "node1")
    assert options["ssh_port"] == 2222 and endpoint(options).port == 2222
