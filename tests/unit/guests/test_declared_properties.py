"""The inventory's ``guest`` declaration and its node's connection data, driven by generated junk: every bad field is
one line naming the field (an unknown key names the closest known one, a quoted bool says to write it bare), never a
traceback; through ``labwright guest plan`` it is exit 2 with nothing contacted."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labwright.errors import BadInput
from labwright.guests.model import known_keys, spec_from_data
from support.no_contact import no_contact

KNOWN_KEYS = known_keys()

PVE = {"backend": "proxmox", "node": "pve1", "vmid": 201,
       "template": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"}
NODE = {"proxmox_api_url": "https://127.0.0.1:8006"}

_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)
_QUOTED_BOOL = st.sampled_from(["true", "false", "yes", "no", "on", "off", "1", "0", "True", "FALSE"])
_NOT_BOOL = st.one_of(_QUOTED_BOOL, _TEXT, st.integers().filter(lambda n: n not in (0, 1)), st.floats(),
                      st.lists(st.booleans(), max_size=2))
_BOOL_FIELDS = ["start", "unprivileged", "onboot", "nvidia_runtime"]


def _typo(key: str) -> st.SearchStrategy[str]:
    return st.integers(0, len(key) - 1).map(lambda i: key[:i] + key[i + 1:]).filter(lambda k: k not in KNOWN_KEYS)


#: (what is broken, the guest data, the node data, a word the refusal holds)
_JUNK = st.one_of(
    st.tuples(st.sampled_from(_BOOL_FIELDS), _NOT_BOOL).map(
        lambda kv: (kv[0], {**PVE, kv[0]: kv[1]}, NODE, kv[0])),
    _NOT_BOOL.map(lambda v: ("readonly", {**PVE, "mounts": [{"host": "/a", "guest": "/m", "readonly": v}]}, NODE,
                             "readonly")),
    st.sampled_from(sorted(KNOWN_KEYS)).filter(lambda k: len(k) > 3).flatmap(_typo).map(
        lambda k: ("typo", {**PVE, k: 1}, NODE, f"{k}: unknown key")),
    st.one_of(st.integers(max_value=99), st.integers(min_value=1_000_000_000), _TEXT.filter(
        lambda t: not t.strip().isdigit())).map(lambda v: ("vmid", {**PVE, "vmid": v}, NODE, "vmid")),
    _TEXT.filter(lambda t: not t.isalnum() or not t).map(lambda v: ("node", {**PVE, "node": v}, NODE, "node")),
    st.one_of(_TEXT, st.booleans(), st.integers(max_value=0)).map(
        lambda v: ("memory", {**PVE, "memory": v}, NODE, "memory")),
    st.integers(65536, 10**7).map(lambda p: ("api port", PVE, {"proxmox_api_url": f"https://127.0.0.1:{p}"},
                                             "proxmox_api_url")),
    st.just(("api port 0", PVE, {"proxmox_api_url": "https://127.0.0.1:0"}, "proxmox_api_url")),
    _TEXT.filter(lambda t: "]" not in t and t.isprintable()).map(
        lambda t: ("api ipv6", PVE, {"proxmox_api_url": f"https://[::1{t}/"}, "proxmox_api_url")),
    _QUOTED_BOOL.map(lambda v: ("verify_tls", PVE, {**NODE, "proxmox_verify_tls": v}, "proxmox_verify_tls")),
    st.sampled_from(["proxmox_api_ur", "proxmox_verify_tl", "proxmox_cafile"]).map(
        lambda k: ("node key typo", PVE, {k: "x"}, f"{k}: unknown Proxmox node key")),
)


def _refusal(data: dict[str, Any], node: dict[str, Any]) -> str | None:
    try:
        spec_from_data("@pct/pve1/201", data, source="inv.py", node_data=node)
    except BadInput as refused:
        return str(refused)
    return None


@settings(max_examples=300, deadline=None)
@given(case=_JUNK)
def test_generated_junk_in_a_declaration_is_one_line_naming_the_field(case):
    what, data, node, word = case
    line = _refusal(data, node)
    if what == "node" and line is None:  # a junk node name can still be a name
        return
    assert line is not None, (what, data, node)
    assert "\n" not in line and line.startswith("inv.py: ") and word in line, line
    if what in ("typo",) and "did you mean" not in line:
        assert "the keys are listed in docs/guests.md" in line


@pytest.mark.parametrize("field", _BOOL_FIELDS)
def test_a_quoted_bool_says_to_write_it_bare(field):
    line = _refusal({**PVE, field: "false"}, NODE)
    assert line is not None and f"{field}: 'false' is a string, not true or false; write false without quotes" in line


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_JUNK)
def test_guest_plan_with_junk_is_exit_2_and_contacts_nothing(case, tmp_path_factory, monkeypatch, capsys):
    from labwright.cli import main

    what, data, node, word = case
    if _refusal(data, node) is None:
        return
    monkeypatch.setenv("PROXMOX_TOKEN_ID", "root@pam!labwright")
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", "secret")
    inventory = tmp_path_factory.mktemp("inv") / "inv.py"
    inventory.write_text("import json\n"
                         f"pve_nodes = ([('pve1', json.loads({json.dumps(json.dumps(node))}))], {{}})\n"
                         f"guests = ([('@pct/pve1/201', {{'guest': json.loads({json.dumps(json.dumps(data))})}})], "
                         "{})\n")
    with no_contact() as attempts:
        code = main(["guest", "plan", "-i", str(inventory)])
    out, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert attempts == []


def test_a_good_declaration_does_contact_the_node(tmp_path, monkeypatch, capsys):
    from labwright.cli import main

    monkeypatch.setenv("PROXMOX_TOKEN_ID", "root@pam!labwright")
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", "secret")
    inventory = tmp_path / "inv.py"
    inventory.write_text(f"pve_nodes = ([('pve1', {NODE!r})], {{}})\nguests = ([('@pct/pve1/201', "
                         f"{{'guest': {PVE!r}}})], {{}})\n")
    with no_contact() as attempts:
        code = main(["guest", "plan", "-i", str(inventory)])
    capsys.readouterr()
    assert code != 0 and attempts


# --- every key of the declaration's schema (labwright.guests.schema), each given generated junk -----------------------
_ANY = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10**12, max_value=10**12), st.floats(), _TEXT,
                 st.sampled_from(["0", "1", "false", "8G", "512M", "-1", "local-lvm:64", "vmbr0", "eth0", "dhcp",
                                  "10.0.0.5/24", "/tank", "nesting=1", "0000:01:00", "q35", "win11", "ovmf", "auto",
                                  "nvidia", "lxd", "vm", "a\nb", "a,b", "../x", "99999"]),
                 st.lists(st.one_of(_TEXT, st.integers(), st.dictionaries(_TEXT, _TEXT, max_size=2)), max_size=3),
                 st.dictionaries(st.one_of(_TEXT, st.sampled_from(["host", "guest", "bridge", "ip", "size",
                                                                   "storage", "mapping", "nesting", "limits.cpu"])),
                                 st.one_of(_TEXT, st.integers(), st.booleans(), st.none()), max_size=3))
#: The word a refusal about KEY names when it is not the key itself (``image`` is checked as the template).
_SAID_AS = {"image": "template", "tag": "vlan"}


@settings(max_examples=400, deadline=None)
@given(key=st.sampled_from(sorted(KNOWN_KEYS)), value=_ANY)
def test_generated_junk_for_every_key_is_taken_or_one_line_naming_the_key(key, value):
    """A Proxmox container declared in full, one key replaced by junk: accepted, or one line (no traceback) that
    names the key; VM keys are tried on a VM."""
    base = {**PVE, "kind": "vm", "template": None} if key in ("hostpci", "ostype", "bios", "machine", "disk") else PVE
    data = {k: v for k, v in {**base, key: value}.items() if k in (key,) or v is not None}
    try:
        spec = spec_from_data("llm1", data, source="inv.py", node_data=NODE)
    except BadInput as refused:
        line = str(refused)
        assert "\n" not in line and "\r" not in line and line.startswith("inv.py: "), line
        assert key in line or _SAID_AS.get(key, key) in line or (key == "kind" and "kind: vm" in line) or (
            key == "backend" and "for proxmox guests" in line), (key, line)  # backend: lxd, the vmid kept: named
        return
    assert spec.name and spec.backend == "proxmox"


def _guest_checks() -> list[Any]:
    from labwright.guests import fields
    from labwright.guests.schema import between

    return [fields.mib, fields.memory_mib, fields.gib, fields.guest_bool, fields.word_bool, fields.features,
            fields.mac_address, fields.mount_path, fields.interface_name, fields.bridge_name, fields.pool_name,
            between(1, 8192)]


@settings(max_examples=300, deadline=None)
@given(index=st.integers(0, len(_guest_checks()) - 1), value=_ANY)
def test_the_guest_value_checks_raise_only_a_one_line_value_error(index, value):
    check = _guest_checks()[index]
    try:
        check(value)
    except ValueError as error:
        assert "\n" not in str(error) and str(error), (check, value)
