"""labwright.guests.node_data: a Proxmox node's connection data (the inventory's proxmox_* keys, ``--data`` of the
guest snapshot commands) typed once: a bad URL or port, "false" as a string, an unknown key (with the closest known
one) are one line, exit 2, before the API is contacted."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labwright.errors import BadInput
from labwright.guests.node_data import NODE_KEYS, node_settings, parse_node_items
from labwright.hosts.host_data import connector_keys
from support.no_contact import no_contact

SSH_KEYS = connector_keys("pct")
KNOWN = [*NODE_KEYS, *SSH_KEYS]


@pytest.mark.parametrize(("data", "says"), [
    ({"proxmox_api_url": "https://127.0.0.1:99999"}, "proxmox_api_url: 'https://127.0.0.1:99999' is not a URL"),
    ({"proxmox_api_url": "https://127.0.0.1:0"}, "port 0 is not 1-65535"),
    ({"proxmox_api_url": "http://[::1/v1"}, "invalid IPv6 URL"),
    ({"proxmox_api_url": "http://pve1:8006"}, "is not a https URL (e.g. https://pve1.lan:8006)"),
    ({"proxmox_verify_tls": "false"}, "proxmox_verify_tls: 'false' is not true or false: write true or false "
                                      "without quotes"),
    ({"proxmox_api_ur": "https://pve1:8006"}, "proxmox_api_ur: unknown Proxmox node key (did you mean "
                                              "proxmox_api_url?)"),
    ({"proxmox_root_via": "telnet"}, "proxmox_root_via: 'telnet' is not one of api, ssh"),
])
def test_inventory_node_data_is_typed(data, says):
    with pytest.raises(BadInput) as refused:
        node_settings({"ssh_hostname": "pve1.lan", "cpu": 8, **data}, "node pve1")
    assert str(refused.value).startswith("node pve1: ") and says in str(refused.value)


def test_good_node_data_and_defaults():
    assert node_settings({"proxmox_api_url": "https://[fd00::5]:8443/pve", "proxmox_verify_tls": False,
                          "other": "x"}) == {"proxmox_api_url": "https://[fd00::5]:8443/pve", "proxmox_ca_file": "",
                                             "proxmox_verify_tls": False, "proxmox_root_via": "api"}
    assert node_settings({}) == NODE_KEYS


def test_data_items_typed_with_bare_true_false():
    assert parse_node_items(["proxmox_verify_tls=false", "ssh_hostname=pve1.lan", "ssh_port=2222"], SSH_KEYS) == {
        "proxmox_verify_tls": False, "ssh_hostname": "pve1.lan", "ssh_port": "2222"}
    with pytest.raises(BadInput, match=r"^--data 'proxmox_api_ur=https://x:8006': unknown key proxmox_api_ur "
                                       r"\(did you mean proxmox_api_url\?\)"):
        parse_node_items(["proxmox_api_ur=https://x:8006"], SSH_KEYS)
    with pytest.raises(BadInput, match=r"^--data 'proxmox_api_url=https://h:1': proxmox_api_url is given twice"):
        parse_node_items(["proxmox_api_url=https://h:1", "proxmox_api_url=https://h:1"], SSH_KEYS)


# --- generated junk through the CLI ----------------------------------------------------------------------------
_WORD = st.from_regex(r"\A[a-z][a-z0-9_]{0,24}\Z")


def _typo(key: str) -> st.SearchStrategy[str]:
    return st.integers(0, len(key) - 1).map(lambda i: key[:i] + key[i + 1:]).filter(lambda k: k and k not in KNOWN)


_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)
_JUNK_ITEMS = st.one_of(
    _WORD.filter(lambda k: k not in KNOWN).flatmap(lambda k: _TEXT.map(lambda v: f"{k}={v}")),  # unknown key
    st.sampled_from(list(NODE_KEYS)).flatmap(_typo).map(lambda k: f"{k}=x"),  # a typo of a known key
    st.integers(65536, 10**8).map(lambda p: f"proxmox_api_url=https://127.0.0.1:{p}"),
    st.just("proxmox_api_url=https://127.0.0.1:0"),
    _TEXT.filter(lambda t: "]" not in t and t.isprintable()).map(lambda t: f"proxmox_api_url=https://[::1{t}/x"),
    st.sampled_from(["http", "ftp", "file", "HTTP:"]).map(lambda s: f"proxmox_api_url={s}://pve1:8006"),
    _TEXT.filter(lambda t: t.strip().lower() not in ("true", "false")).map(lambda t: f"proxmox_verify_tls={t}"),
    _TEXT.filter(lambda t: t.strip().lower() not in ("api", "ssh")).map(lambda t: f"proxmox_root_via={t}"),
    _TEXT.filter(lambda t: "=" not in t and t.strip()),  # no KEY=VALUE at all
)


@pytest.fixture
def credentials(monkeypatch):
    """Proxmox credentials set: a command that gets past its input check dials the API."""
    monkeypatch.setenv("PROXMOX_TOKEN_ID", "root@pam!labwright")
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", "secret")


def test_good_data_does_contact_the_api(credentials, capsys):
    from labwright.cli import main

    with no_contact() as attempts:
        code = main(["guest", "snapshots", "@pct/pve1/101", "--data", "proxmox_api_url=https://127.0.0.1:9"])
    capsys.readouterr()
    assert code != 0 and attempts


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(item=_JUNK_ITEMS, command=st.sampled_from([["snapshots"], ["snapshot", "--dry"], ["restore", "--dry"]]))
def test_generated_junk_data_is_one_line_exit_2_nothing_contacted(item, command, credentials, capsys):
    from labwright.cli import main

    with no_contact() as attempts:
        code = main(["guest", *command, "@pct/pve1/101", "--data", item])
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("labwright: error: --data "), err
    assert "Traceback" not in err and out == "" and attempts == []
