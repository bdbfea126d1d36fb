"""The vendored PVE API schema (tests/support/data) holds what the simulator needs, and nothing is read from outside."""

from __future__ import annotations

import json
import os
from pathlib import Path

from support import pve_schema
from support.pve_schema import ApiSchema
from support.pve_schema_trim import EXTRA, TRIMMED, implemented, trim


def test_the_schema_is_read_from_the_checkout(monkeypatch):
    monkeypatch.delenv(pve_schema.ENV_VAR, raising=False)
    assert pve_schema.schema_path() == pve_schema.VENDORED == TRIMMED
    assert Path(pve_schema.__file__).resolve().parents[2] in TRIMMED.parents


def test_every_implemented_endpoint_keeps_its_full_schema():
    schema = ApiSchema.load(TRIMMED)
    routes = implemented(json.loads(TRIMMED.read_text()))
    assert ("POST", "/nodes/{node}/lxc") in routes and routes >= EXTRA
    for method, path in routes:
        info = schema.endpoints[path].methods[method]
        assert "parameters" in info and "permissions" in info, f"{method} {path}"
    assert len(schema.endpoints) == 435  # every path of pve-docs 9.1.3, so routing is PVE's


def test_a_real_endpoint_the_simulator_lacks_is_still_known():
    schema = ApiSchema.load(TRIMMED)
    endpoint, uri = schema.match("/nodes/pve1/qemu/100/migrate")
    assert endpoint.path == "/nodes/{node}/qemu/{vmid}/migrate" and uri == {"node": "pve1", "vmid": "100"}
    assert set(endpoint.methods) == {"GET", "POST"} and endpoint.methods["GET"] == {"name": "migrate_vm_precondition"}
    assert schema.match("/nodes/pve1/lxc/101/bogus") is None


def test_trimming_reproduces_the_vendored_file():
    """From the full apidata.js when $LABWRIGHT_PVE_APIDATA names it (pve-docs' api-viewer); else the vendored file
    must be trim's fixpoint: trimming it again keeps every implemented route's schema and changes nothing."""
    full = os.environ.get(pve_schema.ENV_VAR)
    tree = pve_schema._load_tree(Path(full)) if full else json.loads(TRIMMED.read_text())
    assert trim(tree, implemented(tree)) == json.loads(TRIMMED.read_text())
