"""deploys/llamacpp.py with deploys/model.py's keys, for real: the model is downloaded from the STAND-IN hub into a
fresh lab container, then the REAL llama-server serves it.

No Hub is reachable here: support.hf_endpoint serves huggingface_hub's documented API from this machine's address on
the test lab's bridge, and the guest's REAL huggingface_hub 2.4.0 (from the wheelhouse cached under
~/.cache/labwright/models-hub/, attached read-only as in test_model_download) downloads from it through HF_ENDPOINT.
The GGUF is the tiny random-weight model of labwright.llamacpp.tiny_model (its completions are exactly max_tokens
long), so "serves it" is a real chat completion from this machine.
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
from pathlib import Path

import pytest

from labwright.lab.lab import instance_address
from labwright.llamacpp.build import build_llama_server
from labwright.llamacpp.tiny_model import write_tiny_gguf
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
PORT = 8001
UNIT = "/etc/systemd/system/llama-server.service"
SERVED = "/srv/models/tiny-llama/tiny.gguf"  # MODEL_DIR/NAME/FILE: what llama-server's --model must name


def sh(lab: Lab, name: str, script: str) -> str:
    result = lab.client.exec(name, ["sh", "-c", script])
    assert result.exit_code == 0, f"{script!r} failed: {result.stderr.decode()}"
    return result.stdout.decode()


@pytest.fixture(scope="module")
def setup(lab: Lab, tmp_path_factory: pytest.TempPathFactory):
    build_llama_server()  # cached per machine after the first build
    gguf = write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf").read_bytes()
    name = lab.fresh("lwmeng")
    try:
        version = sh(lab, name, "python3 -c 'import platform; print(platform.python_version())'").strip()
        wheels = download_wheelhouse([HUB_REQUIREMENT], version, cache_root() / "models-hub" / f"py{version}")
        lab.client.request("PATCH", f"/1.0/instances/{name}", {"devices": {"hub-wheels": {
            "type": "disk", "source": str(wheels), "path": WHEELS, "readonly": "true"}}})
        with StandinHub(bridge_address(lab_subnet())) as hub:
            hub.add(StandinRepo("lab/tiny-llama-GGUF", {"tiny.gguf": gguf, "README.md": b"tiny\n"}))
            yield name, hub, gguf
    finally:
        lab.remove(name)


def deploy(name: str, hub: StandinHub, *data: str) -> DeployRun:
    items = ["llamacpp_alias=tiny", "llamacpp_ctx_size=2048", f"model_endpoint={hub.endpoint}",
             f"model_find_links={WHEELS}", *data]
    return run_pyinfra(f"@lxd/{name}", "deploys/llamacpp.py", *items, cwd=REPO, timeout=900)


GOOD = ("model_repo=lab/tiny-llama-GGUF", "model_file=tiny.gguf", "model_name=tiny-llama")


def chat(address: str, max_tokens: int, key: str) -> dict:
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "Say something."}],
                       "max_tokens": max_tokens, "temperature": 0.8, "seed": 1}).encode()
    request = urllib.request.Request(f"http://{address}:{PORT}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)


def test_stand_in_hub_gguf_is_downloaded_then_served_by_llama_server(lab, setup):
    name, hub, gguf = setup
    hub.reset_log()

    first = deploy(name, hub, *GOOD)

    assert first.rc == 0, first.output[-5000:]
    print(f"\nfirst deploy (download + llama-server): {first.seconds:.1f}s, {first.totals.changed} changed")
    assert [r.range for r in hub.file_gets() if r.server == "cdn"] == [None]  # one transfer of the GGUF
    assert sh(lab, name, f"sha256sum {SERVED}").split()[0] == hashlib.sha256(gguf).hexdigest()
    commit = hub.repos["lab/tiny-llama-GGUF"].commit
    link = sh(lab, name, "readlink /srv/models/tiny-llama").strip()
    assert link == f"hub/models--lab--tiny-llama-GGUF/snapshots/{commit}"
    exec_start = next(line for line in sh(lab, name, f"cat {UNIT}").splitlines() if line.startswith("ExecStart="))
    assert f"--model {SERVED} " in exec_start, exec_start
    # llama-server answers only with the key deploys/llamacpp.py made on the guest (docs/security.md)
    answer = chat(instance_address(lab.client, name) or "", max_tokens=16,
                  key=sh(lab, name, "cat /etc/llama-server/api-key").strip())
    assert answer["usage"]["completion_tokens"] == 16 and answer["choices"][0]["finish_reason"] == "length", answer

    hub.reset_log()
    pid = sh(lab, name, "systemctl show -p MainPID --value llama-server.service").strip()
    again = deploy(name, hub, *GOOD)
    assert again.rc == 0, again.output[-4000:]
    assert (again.totals.changed, again.totals.error) == (0, 0), again.output[-4000:]
    assert hub.requests == []  # the guest's marker says complete: not even the API is asked
    assert sh(lab, name, "systemctl show -p MainPID --value llama-server.service").strip() == pid
    print(f"no-change re-run: {again.seconds:.1f}s")


@pytest.mark.parametrize(("data", "line"), [
    (("model_repo=lab/nope", "model_file=tiny.gguf", "model_name=tiny-llama"),
     "model_repo: 'lab/nope' is not a repo on http://"),
    (("model_repo=lab/tiny-llama-GGUF", "model_revision=v9", "model_file=tiny.gguf", "model_name=tiny-llama"),
     "model_revision: 'v9' is not a branch, tag or commit of lab/tiny-llama-GGUF"),
])
def test_stand_in_hub_bad_repo_or_revision_is_one_line_and_changes_nothing(lab, setup, data, line):
    name, hub, _ = setup
    before = sh(lab, name, f"sha256sum {UNIT} /srv/models/.labwright/tiny-llama.json 2>/dev/null; "
                           "readlink /srv/models/tiny-llama; "
                           "systemctl show -p MainPID --value llama-server.service; ls /srv/models")
    hub.reset_log()

    run = deploy(name, hub, *data)

    assert run.rc != 0
    hits = [text for text in run.output.splitlines() if line in text]
    assert len(hits) == 1 and "nothing was changed" in hits[0], run.output[-4000:]
    assert "Traceback" not in run.output and "Starting operation" not in run.output, run.output[-4000:]
    assert hub.file_gets() == []
    after = sh(lab, name, f"sha256sum {UNIT} /srv/models/.labwright/tiny-llama.json 2>/dev/null; "
                          "readlink /srv/models/tiny-llama; "
                          "systemctl show -p MainPID --value llama-server.service; ls /srv/models")
    assert after == before


def test_a_gguf_named_twice_is_one_line_before_anything_runs(lab, setup):
    name, hub, _ = setup
    hub.reset_log()
    run = deploy(name, hub, *GOOD, "llamacpp_model=/srv/models/other.gguf")
    assert run.rc != 0
    assert "llamacpp_model: '/srv/models/other.gguf' and model_repo lab/tiny-llama-GGUF both name the model" \
        in run.output, run.output[-3000:]
    assert "Starting operation" not in run.output and hub.requests == []
