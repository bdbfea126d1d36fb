"""deploys/model.py for real, in a fresh lab container, downloading from the STAND-IN hub (support.hf_endpoint).

No Hub is reachable here: the stand-in serves huggingface_hub's documented API from this machine's address on the
test lab's bridge, and the guest's REAL huggingface_hub 2.4.0 (from a wheelhouse cached under
~/.cache/labwright/models-hub/, attached read-only: lab containers cannot verify PyPI's certificate here) downloads
from it through HF_ENDPOINT. The files are checked inside the guest with its own sha256sum.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

import pytest

from labwright.models.deploy_data import HUB_REQUIREMENT
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import DeployRun, run_pyinfra
from labwright.wheelhouse import cache_root, download_wheelhouse
from support.hf_endpoint import StandinHub, StandinRepo
from support.tabbyapi_lab import bridge_address, lab_subnet

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
WHEELS = "/mnt/hub-wheels"
MiB = 1024 * 1024
FILES = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"], "num_key_value_heads": 2}\n',
    "tokenizer.json": b'{"version": "1.0"}\n',
    "model.safetensors": random.Random(3).randbytes(4 * MiB),
    "README.md": b"# stand-in\n",
}
GGUF = random.Random(4).randbytes(24 * MiB)  # over two of huggingface_hub's 10 MiB read chunks


def sh(lab: Lab, name: str, script: str) -> tuple[int, str]:
    result = lab.client.exec(name, ["sh", "-c", script])
    return result.exit_code, (result.stdout + result.stderr).decode()


@pytest.fixture(scope="module")
def guest(lab: Lab):
    name = lab.fresh("lwmodel")
    try:
        code, version = sh(lab, name, "python3 -c 'import platform; print(platform.python_version())'")
        assert code == 0, version
        wheels = download_wheelhouse([HUB_REQUIREMENT], version.strip(),
                                     cache_root() / "models-hub" / f"py{version.strip()}")
        lab.client.request("PATCH", f"/1.0/instances/{name}", {"devices": {"hub-wheels": {
            "type": "disk", "source": str(wheels), "path": WHEELS, "readonly": "true"}}})
        with StandinHub(bridge_address(lab_subnet())) as hub:
            hub.add(StandinRepo("lab/tiny", dict(FILES)))
            hub.add(StandinRepo("lab/tiny-GGUF", {"tiny-Q8_0.gguf": GGUF, "README.md": b"gguf\n"}))
            yield name, hub
    finally:
        lab.remove(name)


def deploy(name: str, hub: StandinHub, *data: str) -> DeployRun:
    items = [f"model_endpoint={hub.endpoint}", f"model_find_links={WHEELS}", *data]
    return run_pyinfra(f"@lxd/{name}", "deploys/model.py", *items, cwd=REPO, timeout=900)


def test_stand_in_hub_snapshot_lands_verified_in_the_guest_and_a_rerun_changes_nothing(lab, guest):
    name, hub = guest
    first = deploy(name, hub, "model_repo=lab/tiny", 'model_allow=["*.json","*.safetensors"]')
    assert first.rc == 0, first.output[-5000:]
    assert "Download lab/tiny@main" in first.output
    print(f"\nfirst deploy: {first.seconds:.1f}s, {first.totals.changed} changed")
    commit = hub.repos["lab/tiny"].commit
    code, link = sh(lab, name, "readlink /srv/models/tiny")
    assert code == 0 and link.strip() == f"hub/models--lab--tiny/snapshots/{commit}"
    code, sums = sh(lab, name, "cd /srv/models/tiny && sha256sum -- * && ls")
    assert code == 0, sums
    for file in ("config.json", "tokenizer.json", "model.safetensors"):
        assert f"{hashlib.sha256(FILES[file]).hexdigest()}  {file}" in sums
    assert "README.md" not in sums  # not in the allow patterns
    assert len(hub.file_gets()) == 3

    hub.reset_log()
    again = deploy(name, hub, "model_repo=lab/tiny", 'model_allow=["*.json","*.safetensors"]')
    assert again.rc == 0, again.output[-4000:]
    assert (again.totals.changed, again.totals.error) == (0, 0), again.output[-4000:]
    assert hub.requests == []  # not a file, not even the API: the guest's marker says complete
    print(f"no-change re-run: {again.seconds:.2f}s ({again.totals.no_change} operations)")


def test_stand_in_hub_gguf_cut_half_way_resumes_with_a_range_request_in_the_guest(lab, guest):
    name, hub = guest
    hub.reset_log()
    hub.cut_once["tiny-Q8_0.gguf"] = 15 * MiB
    run = deploy(name, hub, "model_repo=lab/tiny-GGUF", "model_file=tiny-Q8_0.gguf", "model_name=tiny-gguf")
    assert run.rc == 0, run.output[-5000:]
    ranges = [r.range for r in hub.file_gets() if r.server == "cdn"]
    assert ranges == [None, f"bytes={10 * MiB}-"], ranges
    code, out = sh(lab, name, "sha256sum /srv/models/tiny-gguf/tiny-Q8_0.gguf; "
                              "find /srv/models/hub -name '*.incomplete' | wc -l")
    assert code == 0 and out.split()[0] == hashlib.sha256(GGUF).hexdigest() and out.split()[-1] == "0", out


@pytest.mark.parametrize(("data", "line"), [
    (["model_repo=lab/nope"], "model_repo: 'lab/nope' is not a repo on http://"),
    (["model_repo=lab/tiny", "model_revision=v9", "model_name=tiny-v9"],
     "model_revision: 'v9' is not a branch, tag or commit of lab/tiny"),
    (["model_repo=lab/tiny-GGUF", "model_file=tiny-Q2.gguf", "model_name=tiny-q2"],
     "model_file: 'tiny-Q2.gguf' is not a file of lab/tiny-GGUF@main"),
])
def test_stand_in_hub_not_found_is_one_line_before_any_operation(lab, guest, data, line):
    name, hub = guest
    hub.reset_log()
    run = deploy(name, hub, *data)
    assert run.rc != 0
    assert f"{line}" in run.output and "nothing was changed" in run.output, run.output[-4000:]
    assert "Traceback" not in run.output and "Starting operation" not in run.output, run.output[-4000:]
    link = next((d.split("=", 1)[1] for d in data if d.startswith("model_name=")), "nope")
    code, _ = sh(lab, name, f"test -e /srv/models/{link} || test -e /srv/models/.labwright/{link}.json")
    assert code != 0
    assert hub.file_gets() == []


def test_stand_in_hub_not_found_in_a_fresh_guest_installs_nothing(lab, guest):
    """The refusal comes from the probe (the runner's source on the guest's bare python3), not from the venv."""
    _, hub = guest
    fresh = lab.fresh("lwmodel")
    try:
        run = deploy(fresh, hub, "model_repo=lab/nope")
        assert run.rc != 0 and "model_repo: 'lab/nope' is not a repo" in run.output, run.output[-4000:]
        code, out = sh(lab, fresh, "ls -d /opt/labwright-models /srv/models 2>&1; dpkg -s python3-venv 2>&1 | head -1")
        assert "No such file" in out and "is not installed" in out, out
    finally:
        lab.remove(fresh)


def test_stand_in_hub_corrupted_bytes_are_refused_in_the_guest_and_the_old_model_stays(lab, guest):
    name, hub = guest
    weights = random.Random(5).randbytes(2 * MiB)  # not in the guest's cache yet: a real download of bad bytes
    hub.add(StandinRepo("lab/other", {"config.json": FILES["config.json"], "model.safetensors": weights}))
    assert deploy(name, hub, "model_repo=lab/other", "model_allow=*.json").rc == 0
    code, before = sh(lab, name, "readlink /srv/models/other; sha256sum /srv/models/.labwright/other.json")
    assert code == 0, before
    hub.corrupt.add("model.safetensors")
    try:
        run = deploy(name, hub, "model_repo=lab/other")
    finally:
        hub.corrupt.clear()
    assert run.rc != 0
    assert "checksum mismatch in lab/other@" in run.output and "model.safetensors (sha256" in run.output, \
        run.output[-4000:]
    code, after = sh(lab, name, "readlink /srv/models/other; sha256sum /srv/models/.labwright/other.json; "
                                "test ! -e /srv/models/other/model.safetensors")
    assert code == 0 and after == before, (before, after)  # the previous model and its marker, untouched
    fixed = deploy(name, hub, "model_repo=lab/other")  # the hub serves the right bytes again: downloaded, marked
    assert fixed.rc == 0, fixed.output[-4000:]
    code, out = sh(lab, name, "sha256sum /srv/models/other/model.safetensors")
    assert out.split()[0] == hashlib.sha256(weights).hexdigest()


def test_a_typo_in_the_data_is_one_line_and_changes_nothing(lab, guest):
    name, hub = guest
    hub.reset_log()
    run = deploy(name, hub, "model_repo=lab/tiny", "model_revison=v1")
    assert run.rc != 0
    assert "model_revison: not a key of deploys/model.py" in run.output, run.output[-3000:]
    assert "Traceback" not in run.output and hub.requests == []


def _mapped_root(lab: Lab, name: str) -> tuple[int, int]:
    """The host uid and gid the unprivileged container's root is mapped to (LXD's volatile.idmap.current)."""
    config = lab.client.instance(name)["config"]
    maps = json.loads(config.get("volatile.idmap.current") or config.get("volatile.last_state.idmap") or "[]")
    uid = next(m["Hostid"] for m in maps if m["Isuid"] and m["Nsid"] == 0)
    gid = next(m["Hostid"] for m in maps if m["Isgid"] and m["Nsid"] == 0)
    return uid, gid


def test_two_guests_sharing_model_dir_on_a_mount_download_each_blob_once(lab, tmp_path):
    # docs/models.md "Sharing the cache between guests": model_dir on a host directory mounted into both guests (an
    # LXD disk device), owned by the guests' mapped root. The first guest downloads; the second, asking for the same
    # repo under another name, finds every blob in the shared cache: no file is fetched again, the sums match.
    shared = tmp_path / "models"
    shared.mkdir()
    names = [lab.fresh("lwshare"), lab.fresh("lwshare")]
    try:
        uid, gid = _mapped_root(lab, names[0])
        assert _mapped_root(lab, names[1]) == (uid, gid), "the two guests must share one idmap to share a directory"
        os.chown(shared, uid, gid)
        tmp_path.chmod(0o755)
        code, version = sh(lab, names[0], "python3 -c 'import platform; print(platform.python_version())'")
        assert code == 0, version
        wheels = download_wheelhouse([HUB_REQUIREMENT], version.strip(),
                                     cache_root() / "models-hub" / f"py{version.strip()}")
        for name in names:
            lab.client.request("PATCH", f"/1.0/instances/{name}", {"devices": {
                "hub-wheels": {"type": "disk", "source": str(wheels), "path": WHEELS, "readonly": "true"},
                "models": {"type": "disk", "source": str(shared), "path": "/srv/models"}}})
        with StandinHub(bridge_address(lab_subnet())) as hub:
            hub.add(StandinRepo("lab/shared", dict(FILES)))
            first = deploy(names[0], hub, "model_repo=lab/shared", 'model_allow=["*.json","*.safetensors"]',
                           "model_name=shared-a")
            assert first.rc == 0, first.output[-5000:]
            assert len(hub.file_gets()) == 3
            hub.reset_log()
            second = deploy(names[1], hub, "model_repo=lab/shared", 'model_allow=["*.json","*.safetensors"]',
                            "model_name=shared-b")
            assert second.rc == 0, second.output[-5000:]
            assert hub.file_gets() == [], [r.path for r in hub.file_gets()]  # every blob came from the shared cache
        for name, link in zip(names, ("shared-a", "shared-b"), strict=True):
            code, sums = sh(lab, name, f"cd /srv/models/{link} && sha256sum -- *")
            assert code == 0, sums
            for file in ("config.json", "tokenizer.json", "model.safetensors"):
                assert f"{hashlib.sha256(FILES[file]).hexdigest()}  {file}" in sums
        blobs = list((shared / "hub" / "models--lab--shared" / "blobs").iterdir())
        assert len(blobs) == 3, blobs  # one copy of each file on the host, for both guests
    finally:
        for name in names:
            lab.remove(name)
