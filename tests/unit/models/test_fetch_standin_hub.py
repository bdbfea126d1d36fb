"""The fetch runner with the REAL huggingface_hub client against the stand-in hub (support.hf_endpoint) via HF_ENDPOINT.

The runner runs as the guest runs it: the file itself, as a script, in a subprocess (exit status, stderr lines).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labwright.models import fetch
from labwright.models.spec import parse_spec
from support.hf_endpoint import StandinHub, StandinRepo

RUNNER = Path(fetch.__file__)
MiB = 1024 * 1024
CHUNK = 10 * MiB  # huggingface_hub 2.4.0 constants.py line 40, DOWNLOAD_CHUNK_SIZE: what a cut transfer keeps


def payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


FILES = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"], "num_attention_heads": 8}\n',
    "tokenizer.json": b'{"version": "1.0"}\n',
    "model.safetensors": payload(3 * MiB, 1),
    "README.md": b"# tiny\n",
    "extra/notes.txt": b"not wanted\n",
}
GGUF = payload(24 * MiB, 2)  # over two of huggingface_hub's 10 MiB chunks: a cut at 15 MiB keeps one


@pytest.fixture
def hub():
    with StandinHub() as standin:
        tiny = standin.add(StandinRepo("lab/tiny", dict(FILES)))
        tiny.branches["v1"] = tiny.commit
        standin.add(StandinRepo("lab/tiny-GGUF", {"tiny-Q8_0.gguf": GGUF, "README.md": b"gguf\n"}))
        yield standin


def run(hub: StandinHub, models: Path, **data) -> subprocess.CompletedProcess[str]:
    spec = parse_spec(data)
    env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(models.parent / "hf-home")}
    env.pop("HF_TOKEN", None)
    env.pop("HF_TOKEN_PATH", None)
    return subprocess.run([sys.executable, str(RUNNER), "--spec", json.dumps(spec.as_json()), "--cache",
                           str(models / "hub"), "--models", str(models)], capture_output=True, text=True, env=env,
                          timeout=300)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def unmarked(models: Path, name: str) -> bool:
    return not (models / name).is_symlink() and not fetch.marker_path(models, name).exists()


def test_stand_in_hub_snapshot_download_verifies_and_links_the_model(hub, tmp_path):
    models = tmp_path / "models"
    proc = run(hub, models, repo="lab/tiny", allow=["*.json", "*.safetensors"])
    assert proc.returncode == 0, proc.stderr
    assert "3 files" in proc.stdout and "checksums verified" in proc.stdout
    commit = hub.repos["lab/tiny"].commit
    assert os.readlink(models / "tiny") == f"hub/models--lab--tiny/snapshots/{commit}"
    assert {p.name for p in (models / "tiny").iterdir()} == {"config.json", "tokenizer.json", "model.safetensors"}
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        assert (models / "tiny" / name).read_bytes() == FILES[name]
    marker = json.loads(fetch.marker_path(models, "tiny").read_text())
    assert marker["commit"] == commit
    assert marker["files"]["model.safetensors"]["sha256"] == hashlib.sha256(FILES["model.safetensors"]).hexdigest()
    assert "git-sha1" in marker["files"]["config.json"]  # a file in git is checked by its blob id
    fetched = {(r.server, r.path.rsplit("/", 1)[-1]) for r in hub.file_gets()}
    assert ("cdn", hashlib.sha256(FILES["model.safetensors"]).hexdigest()) in fetched  # LFS: via the 302
    assert len(hub.file_gets()) == 3


def test_stand_in_hub_second_run_downloads_nothing(hub, tmp_path):
    models = tmp_path / "models"
    assert run(hub, models, repo="lab/tiny", allow="*.safetensors").returncode == 0
    hub.reset_log()
    again = run(hub, models, repo="lab/tiny", allow="*.safetensors")
    assert again.returncode == 0 and again.stdout.startswith("complete:"), again.stdout + again.stderr
    assert hub.requests == []  # the marker says complete: not even the API is asked
    # Without the marker (a crash after the files, before it), huggingface_hub's cache still serves every file.
    fetch.marker_path(models, "tiny").unlink()
    third = run(hub, models, repo="lab/tiny", allow="*.safetensors")
    assert third.returncode == 0 and third.stdout.startswith("downloaded:"), third.stderr
    assert hub.file_gets() == [] and hub.requests, hub.requests


def test_stand_in_hub_cut_download_resumes_with_a_range_request(hub, tmp_path):
    models = tmp_path / "models"
    hub.cut_once["tiny-Q8_0.gguf"] = 15 * MiB
    proc = run(hub, models, repo="lab/tiny-GGUF", file="tiny-Q8_0.gguf")
    assert proc.returncode == 0, proc.stderr
    gets = [r for r in hub.file_gets() if r.server == "cdn"]
    assert [r.range for r in gets] == [None, f"bytes={CHUNK}-"], gets
    local = models / "tiny-GGUF" / "tiny-Q8_0.gguf"
    assert hashlib.sha256(local.read_bytes()).hexdigest() == hashlib.sha256(GGUF).hexdigest()
    assert not list((models / "hub").rglob("*.incomplete"))


def test_stand_in_hub_corrupted_file_is_refused_and_never_marked_complete(hub, tmp_path):
    models = tmp_path / "models"
    hub.corrupt.add("model.safetensors")
    proc = run(hub, models, repo="lab/tiny", allow=["*.json", "*.safetensors"])
    assert proc.returncode == 1
    line = one_line(proc)
    assert line.startswith("checksum mismatch in lab/tiny@") and "model.safetensors (sha256" in line, line
    assert unmarked(models, "tiny")
    assert not list((models / "hub").rglob("model.safetensors"))  # the pointer is gone
    blobs = models / "hub" / "models--lab--tiny" / "blobs"
    assert hashlib.sha256(FILES["model.safetensors"]).hexdigest() not in {p.name for p in blobs.iterdir()}
    # The hub serves the right bytes again: the next run downloads the file anew and marks it complete.
    hub.corrupt.clear()
    hub.reset_log()
    again = run(hub, models, repo="lab/tiny", allow=["*.json", "*.safetensors"])
    assert again.returncode == 0, again.stderr
    assert (models / "tiny" / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    assert len(hub.file_gets()) == 1  # only the file that was refused


def test_stand_in_hub_a_failed_new_spec_leaves_the_previous_model_in_place(hub, tmp_path):
    models = tmp_path / "models"
    assert run(hub, models, repo="lab/tiny", allow="*.json").returncode == 0
    before = (os.readlink(models / "tiny"), fetch.marker_path(models, "tiny").read_bytes())
    hub.corrupt.add("model.safetensors")
    proc = run(hub, models, repo="lab/tiny", allow=["*.json", "*.safetensors"])
    assert proc.returncode == 1 and "checksum mismatch" in one_line(proc)
    assert (os.readlink(models / "tiny"), fetch.marker_path(models, "tiny").read_bytes()) == before


@pytest.mark.parametrize(("data", "start", "words"), [
    ({"repo": "lab/nope"}, "model_repo: 'lab/nope' is not a repo on http://", "check the name"),
    ({"repo": "lab/tiny", "revision": "v9"}, "model_revision: 'v9' is not a branch, tag or commit of lab/tiny",
     "nothing was downloaded"),
    ({"repo": "lab/tiny", "revision": "f" * 40}, "model_revision: 'ffff", "nothing was downloaded"),
    ({"repo": "lab/tiny-GGUF", "file": "tiny-Q4_K_M.gguf"},
     "model_file: 'tiny-Q4_K_M.gguf' is not a file of lab/tiny-GGUF@main", "nothing was downloaded"),
    ({"repo": "lab/tiny", "allow": "*.gguf"}, "model_allow/model_ignore: no file of lab/tiny@main matches",
     "config.json"),
])
def test_stand_in_hub_not_found_is_one_line_exit_2_and_nothing_marked(hub, tmp_path, data, start, words):
    models = tmp_path / "models"
    proc = run(hub, models, **data)
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc)
    assert line.startswith(start) and words in line, line
    assert unmarked(models, parse_spec(data).name)
    assert hub.file_gets() == []


def test_stand_in_hub_a_name_taken_by_a_real_directory_is_refused(hub, tmp_path):
    models = tmp_path / "models"
    (models / "tiny").mkdir(parents=True)
    proc = run(hub, models, repo="lab/tiny", allow="*.json")
    assert proc.returncode == 2
    assert one_line(proc).startswith(f"model_name: {models / 'tiny'} exists and is not a link labwright made")
    assert hub.requests == [] and not fetch.marker_path(models, "tiny").exists()


def test_the_check_mode_reads_only_the_disk(hub, tmp_path):
    models = tmp_path / "models"
    spec = parse_spec({"repo": "lab/tiny", "allow": "*.json"})
    check = [sys.executable, str(RUNNER), "--check", "--spec", json.dumps(spec.as_json()), "--cache",
             str(models / "hub"), "--models", str(models)]
    assert subprocess.run(check, capture_output=True, text=True).returncode == 3
    assert run(hub, models, repo="lab/tiny", allow="*.json").returncode == 0
    hub.reset_log()
    assert subprocess.run(check, capture_output=True, text=True).returncode == 0
    (models / "tiny" / "config.json").unlink()  # a file gone from the cache: no longer complete
    assert subprocess.run(check, capture_output=True, text=True).returncode == 3
    assert hub.requests == []


def test_a_bad_spec_argument_is_one_line_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, str(RUNNER), "--spec", "{not json", "--cache", str(tmp_path / "c"),
                           "--models", str(tmp_path / "m")], capture_output=True, text=True)
    assert proc.returncode == 2 and one_line(proc).startswith("--spec: not a model spec")
    assert not (tmp_path / "m").exists()


def test_stand_in_hub_runner_killed_mid_transfer_marks_nothing_and_the_rerun_completes(hub, tmp_path):
    models = tmp_path / "models"
    spec = parse_spec({"repo": "lab/tiny-GGUF", "file": "tiny-Q8_0.gguf"})
    hub.stall["tiny-Q8_0.gguf"] = 12 * MiB  # past one 10 MiB chunk: a partial file is on disk when it is killed
    env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf-home")}
    proc = subprocess.Popen([sys.executable, str(RUNNER), "--spec", json.dumps(spec.as_json()), "--cache",
                             str(models / "hub"), "--models", str(models)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        assert hub.stalled.wait(timeout=120), "the stand-in hub never sent the first 12 MiB of tiny-Q8_0.gguf"
        blobs = models / "hub" / "models--lab--tiny-GGUF" / "blobs"
        deadline = time.monotonic() + 60
        while not any(p.stat().st_size >= CHUNK for p in blobs.glob("*.incomplete")):
            assert time.monotonic() < deadline, f"no partial file of {CHUNK} bytes appeared in {blobs}"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        hub.release.set()
    assert proc.returncode == -signal.SIGKILL
    assert unmarked(models, "tiny-GGUF") and list(blobs.glob("*.incomplete"))  # the killed writer's partial
    again = run(hub, models, repo="lab/tiny-GGUF", file="tiny-Q8_0.gguf")
    assert again.returncode == 0, again.stderr
    local = models / "tiny-GGUF" / "tiny-Q8_0.gguf"
    assert hashlib.sha256(local.read_bytes()).hexdigest() == hashlib.sha256(GGUF).hexdigest()
    assert not list(blobs.glob("*.incomplete"))  # the orphaned partial was removed (its lock was free)


def test_stand_in_hub_a_transfer_cut_every_time_fails_in_one_line_and_leaves_no_partial(hub, tmp_path):
    models = tmp_path / "models"
    hub.cut_always["tiny-Q8_0.gguf"] = 1 * MiB  # less than a read chunk: no retry makes progress
    proc = run(hub, models, repo="lab/tiny-GGUF", file="tiny-Q8_0.gguf")
    assert proc.returncode == 1
    line = one_line(proc)
    assert line.startswith(f"download of lab/tiny-GGUF@main from {hub.endpoint} failed: ") and "re-run" in line, line
    assert unmarked(models, "tiny-GGUF")
    assert not list((models / "hub").rglob("*.incomplete")) and not list((models / "hub").rglob("tiny-Q8_0.gguf"))
    assert len([r for r in hub.file_gets() if r.server == "cdn"]) == 6  # the first try and huggingface_hub's 5 retries


def probe(hub: StandinHub, models: Path, **data) -> str:
    """The runner's --probe as the deploy's fact runs it: its source on stdin of a bare python3."""
    spec = parse_spec(data)
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH")}
    env["HF_HOME"] = str(models.parent / "hf-home")  # no token file of this machine's user is sent
    proc = subprocess.run([sys.executable, "-", "--probe", "--spec", json.dumps(spec.as_json()), "--cache",
                           str(models / "hub"), "--models", str(models), "--endpoint", hub.endpoint],
                          input=RUNNER.read_text(), capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout.strip()


@pytest.mark.parametrize(("data", "start"), [
    ({"repo": "lab/nope"}, "refused model_repo: 'lab/nope' is not a repo on http://"),
    ({"repo": "lab/tiny", "revision": "v9"}, "refused model_revision: 'v9' is not a branch, tag or commit of lab/tiny"),
    ({"repo": "lab/tiny-GGUF", "file": "tiny-Q2.gguf"}, "refused model_file: 'tiny-Q2.gguf' is not a file of"),
    ({"repo": "lab/tiny-GGUF", "file": "tiny-Q8_0.gguf"}, "incomplete"),
    ({"repo": "lab/tiny", "allow": "*.json"}, "incomplete"),
])
def test_stand_in_hub_probe_asks_before_anything_is_installed(hub, tmp_path, data, start):
    answer = probe(hub, tmp_path / "models", **data)
    assert answer.startswith(start) and "\n" not in answer, answer
    assert hub.file_gets() == [] and not (tmp_path / "models").exists()


def test_stand_in_hub_probe_says_complete_without_asking_the_hub(hub, tmp_path):
    models = tmp_path / "models"
    assert run(hub, models, repo="lab/tiny", allow="*.json").returncode == 0
    hub.reset_log()
    assert probe(hub, models, repo="lab/tiny", allow="*.json") == "complete"
    assert hub.requests == []


def test_stand_in_hub_probe_of_an_unreachable_hub_is_incomplete_not_refused(tmp_path):
    with StandinHub() as gone:
        endpoint = gone.endpoint
    spec = parse_spec({"repo": "lab/tiny"})
    proc = subprocess.run([sys.executable, "-", "--probe", "--spec", json.dumps(spec.as_json()), "--cache",
                           str(tmp_path / "hub"), "--models", str(tmp_path), "--endpoint", endpoint],
                          input=RUNNER.read_text(), capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout.strip()) == (0, "incomplete")
