"""The Hub's refusals (``X-Error-Code`` / ``X-Error-Message``) as one line naming the repo and the fix.

The Hub says why it refused a request in two headers that huggingface_hub's ``hf_raise_for_status`` reads
(huggingface_hub 2.4.0, the pinned client: utils/_http.py 871-953, errors.py 313-465; upstream
huggingface/huggingface_hub main at ee0a451: src/huggingface_hub/utils/_http.py 803-886): ``GatedRepo`` (401 without a
token, 403 with one that has no access), ``RepoNotFound`` (or a bare 401: missing and private repos are answered alike),
``RevisionNotFound``, ``EntryNotFound``, the message "Access to this resource is disabled." and "Invalid credentials in
Authorization header". labwright.models.fetch.hub_refusal reads them for every request it makes (the probe's, and
huggingface_hub's through the error's response) and says each in one line; exit 2 for these, exit 1 with the Hub's
own code and message for a code it does not know.

The runner runs as the guest runs it (the file, as a script, the REAL huggingface_hub client) against the stand-in hub
(support.hf_endpoint), which answers gated, private, disabled and unknown refusals with the real Hub's headers.
"""

from __future__ import annotations

import email.message
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labwright.models import fetch
from labwright.models.spec import parse_spec
from support.hf_endpoint import StandinHub, StandinRepo

RUNNER = Path(fetch.__file__)
FILES = {"config.json": b'{"architectures": ["LlamaForCausalLM"]}\n', "model.safetensors": os.urandom(64 * 1024)}
GGUF = {"tiny-Q8_0.gguf": os.urandom(64 * 1024), "README.md": b"gguf\n"}
GRANTED, NOT_GRANTED = "hf_granted_token", "hf_other_token"


@pytest.fixture
def hub():
    with StandinHub() as standin:
        standin.tokens |= {GRANTED, NOT_GRANTED}
        standin.add(StandinRepo("lab/gated", dict(FILES), gated="manual", readers={GRANTED}))
        standin.add(StandinRepo("lab/gated-GGUF", dict(GGUF), gated="auto", readers={GRANTED}))
        standin.add(StandinRepo("lab/private", dict(FILES), private=True, readers={GRANTED}))
        standin.add(StandinRepo("lab/disabled", dict(FILES), disabled=True))
        standin.add(StandinRepo("lab/tiny", dict(FILES)))
        yield standin


def clean_env(tmp_path: Path, token: str | None) -> dict[str, str]:
    """No token but the one given: HF_HOME (and so the token file huggingface_hub reads) under tmp_path."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH")}
    env["HF_HOME"] = str(tmp_path / "hf-home")
    if token is not None:
        env["HF_TOKEN"] = token
    return env


def run(hub: StandinHub, tmp_path: Path, token: str | None = None, **data) -> subprocess.CompletedProcess[str]:
    models = tmp_path / "models"
    spec = parse_spec(data)
    env = {**clean_env(tmp_path, token), "HF_ENDPOINT": hub.endpoint}
    return subprocess.run([sys.executable, str(RUNNER), "--spec", json.dumps(spec.as_json()), "--cache",
                           str(models / "hub"), "--models", str(models)], capture_output=True, text=True, env=env,
                          timeout=300)


def probe(hub: StandinHub, tmp_path: Path, token: str | None = None, **data) -> str:
    """The runner's --probe as the deploy's fact runs it: its source on stdin of a bare python3 (stdlib only)."""
    models = tmp_path / "models"
    spec = parse_spec(data)
    proc = subprocess.run([sys.executable, "-", "--probe", "--spec", json.dumps(spec.as_json()), "--cache",
                           str(models / "hub"), "--models", str(models), "--endpoint", hub.endpoint],
                          input=RUNNER.read_text(), capture_output=True, text=True, timeout=120,
                          env=clean_env(tmp_path, token))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout.strip()


def refusal(proc: subprocess.CompletedProcess[str], status: int) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == status, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def nothing_marked(tmp_path: Path, name: str) -> bool:
    models = tmp_path / "models"
    return not (models / name).is_symlink() and not fetch.marker_path(models, name).exists()


# --- through the download (huggingface_hub's own requests) ---------------------------------------------------------

@pytest.mark.parametrize("data", [{"repo": "lab/gated"}, {"repo": "lab/gated-GGUF", "file": "tiny-Q8_0.gguf"}],
                         ids=["snapshot", "one-file"])
def test_a_gated_repo_without_a_token_names_the_gate_and_the_fix(hub, tmp_path, data):
    line = refusal(run(hub, tmp_path, **data), 2)
    repo = data["repo"]
    assert line.startswith(f"model_repo: {repo!r} is gated on {hub.endpoint} (no token was sent"), line
    assert f"accept its licence on {hub.endpoint}/{repo}, then give a token of that account in HF_TOKEN" in line
    assert line.endswith("; nothing was downloaded") and "could not" not in line
    assert nothing_marked(tmp_path, parse_spec(data).name) and hub.file_gets() == []
    refused = [r for r in hub.requests if "/resolve/" in r.path]
    assert refused and all(r.token is None for r in hub.requests)  # the Hub was asked for a file, without a token


def test_a_gated_repo_with_a_token_that_has_no_access_says_the_token_was_sent(hub, tmp_path):
    line = refusal(run(hub, tmp_path, token=NOT_GRANTED, repo="lab/gated"), 2)
    assert line.startswith(f"model_repo: 'lab/gated' is gated on {hub.endpoint} and the token sent (HF_TOKEN) has no "
                           "access to it yet: accept its licence on " f"{hub.endpoint}/lab/gated"), line
    assert "no token was sent" not in line and line.endswith("; nothing was downloaded")
    assert {r.token for r in hub.requests} == {NOT_GRANTED}
    assert nothing_marked(tmp_path, "gated") and hub.file_gets() == []


def test_a_gated_repo_downloads_with_a_token_that_has_access(hub, tmp_path):
    proc = run(hub, tmp_path, token=GRANTED, repo="lab/gated")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert (tmp_path / "models" / "gated" / "model.safetensors").read_bytes() == FILES["model.safetensors"]


@pytest.mark.parametrize(("token", "words"), [(None, "(no token was sent: HF_TOKEN is not set)"),
                                              (NOT_GRANTED, "(the token sent cannot read it)")])
def test_a_private_repo_is_not_found_check_the_name_or_give_a_token(hub, tmp_path, token, words):
    line = refusal(run(hub, tmp_path, token=token, repo="lab/private"), 2)
    assert line.startswith(f"model_repo: 'lab/private' is not a repo on {hub.endpoint}"), line
    assert "check the name" in line and "a private repo needs a token" in line and words in line, line
    assert run(hub, tmp_path, token=GRANTED, repo="lab/private").returncode == 0


def test_a_disabled_repo_is_one_line(hub, tmp_path):
    line = refusal(run(hub, tmp_path, repo="lab/disabled"), 2)
    assert line.startswith(f"model_repo: 'lab/disabled' is disabled on {hub.endpoint}"), line
    assert "Access to this resource is disabled." in line and "choose another repo" in line


def test_a_token_the_hub_refuses_is_named(hub, tmp_path):
    line = refusal(run(hub, tmp_path, token="hf_revoked", repo="lab/tiny"), 2)
    assert line.startswith(f"HF_TOKEN: {hub.endpoint} refused the token sent ('Invalid credentials in Authorization "
                           "header')"), line


def test_a_refusal_the_runner_does_not_know_is_reported_with_the_hubs_own_code_and_message(hub, tmp_path):
    # huggingface_hub wraps a HEAD refusal it does not know in LocalEntryNotFoundError ("check your connection": 2.4.0
    # file_download.py 1960-1967): the Hub's answer is read off the error it was raised from.
    hub.refuse_file["tiny-Q8_0.gguf"] = (403, "ExportControlled", "This model is not available in your region")
    hub.add(StandinRepo("lab/tiny-GGUF", dict(GGUF)))
    line = refusal(run(hub, tmp_path, repo="lab/tiny-GGUF", file="tiny-Q8_0.gguf"), 1)
    assert line.startswith(f"download of lab/tiny-GGUF@main from {hub.endpoint} failed: the Hub answered 403 "
                           "ExportControlled (tiny-Q8_0.gguf): This model is not available in your region"), line
    assert "connection" not in line and nothing_marked(tmp_path, "tiny-GGUF")


# --- through the probe (stdlib requests, before anything is installed) ---------------------------------------------

@pytest.mark.parametrize(("token", "data", "start"), [
    (None, {"repo": "lab/gated"}, "refused model_repo: 'lab/gated' is gated on http://"),
    (None, {"repo": "lab/gated-GGUF", "file": "tiny-Q8_0.gguf"}, "refused model_repo: 'lab/gated-GGUF' is gated on "),
    (NOT_GRANTED, {"repo": "lab/gated"}, "refused model_repo: 'lab/gated' is gated on http://"),
    (GRANTED, {"repo": "lab/gated"}, "incomplete"),
    (GRANTED, {"repo": "lab/gated-GGUF", "file": "tiny-Q8_0.gguf"}, "incomplete"),
    (None, {"repo": "lab/private"}, "refused model_repo: 'lab/private' is not a repo on http://"),
    (None, {"repo": "lab/disabled"}, "refused model_repo: 'lab/disabled' is disabled on http://"),
    ("hf_revoked", {"repo": "lab/tiny"}, "refused HF_TOKEN: http://"),
    (None, {"repo": "lab/tiny"}, "incomplete"),
])
def test_the_probe_names_the_gate_before_anything_is_installed(hub, tmp_path, token, data, start):
    answer = probe(hub, tmp_path, token, **data)
    assert answer.startswith(start) and "\n" not in answer, answer
    if data["repo"] == "lab/gated" and token is None:
        assert f"accept its licence on {hub.endpoint}/lab/gated" in answer and "no token was sent" in answer
    assert hub.file_gets() == [] and not (tmp_path / "models").exists()


def test_the_probe_sends_the_token_huggingface_hub_would_send_from_its_token_file(hub, tmp_path):
    (tmp_path / "hf-home").mkdir()
    (tmp_path / "hf-home" / "token").write_text(f"{GRANTED}\n")  # HF_HOME/token: what `hf auth login` writes
    assert probe(hub, tmp_path, repo="lab/gated") == "incomplete"
    assert {r.token for r in hub.requests} == {GRANTED}


# --- the function itself ------------------------------------------------------------------------------------------

def headers(**values: str) -> email.message.Message:
    """Headers as urllib gives them (case-insensitive ``get``)."""
    message = email.message.Message()
    for name, value in values.items():
        message[name.replace("_", "-")] = value
    return message


SPEC = {"repo": "org/model", "revision": "main", "file": None, "name": "model"}


@pytest.mark.parametrize(("status", "answer", "sent", "status_out", "start"), [
    (401, {"x_error_code": "GatedRepo"}, False, 2, "model_repo: 'org/model' is gated on https://hub.test (no token"),
    (403, {"X-Error-Code": "GatedRepo"}, True, 2, "model_repo: 'org/model' is gated on https://hub.test and the token"),
    (401, {"X-Error-Code": "RepoNotFound"}, False, 2, "model_repo: 'org/model' is not a repo on https://hub.test"),
    (404, {"X-Error-Code": "RepoNotFound"}, True, 2, "model_repo: 'org/model' is not a repo on https://hub.test"),
    (401, {}, False, 2, "model_repo: 'org/model' is not a repo on https://hub.test"),
    (404, {"X-Error-Code": "RevisionNotFound"}, False, 2, "model_revision: 'main' is not a branch, tag or commit"),
    (403, {"X-Error-Message": "Access to this resource is disabled."}, False, 2, "model_repo: 'org/model' is disabled"),
    (401, {"X-Error-Message": "Invalid credentials in Authorization header"}, True, 2, "HF_TOKEN: https://hub.test "),
    (429, {"X-Error-Code": "RateLimited", "X-Error-Message": "slow down"}, False, 1,
     "download of org/model@main from https://hub.test failed: the Hub answered 429 RateLimited: slow down"),
    (451, {"X-Error-Message": "Unavailable For Legal Reasons"}, False, 1,
     "download of org/model@main from https://hub.test failed: the Hub answered 451: Unavailable For Legal Reasons"),
])
def test_hub_refusal_turns_each_code_into_one_line(status, answer, sent, status_out, start):
    refused = fetch.hub_refusal(status, headers(**answer), SPEC, "https://hub.test/", sent)
    assert refused is not None and refused.status == status_out
    line = str(refused)
    assert line.startswith(start) and "\n" not in line, line
    if status_out == 2:
        assert line.endswith("; nothing was downloaded"), line
    if answer.get("x_error_code", answer.get("X-Error-Code")) == "GatedRepo":
        assert "https://hub.test/org/model" in line and ("no token was sent" in line) is not sent, line


def test_hub_refusal_of_an_entry_names_the_file_only_for_a_file_spec():
    spec = {**SPEC, "file": "q.gguf"}
    refused = fetch.hub_refusal(404, headers(X_Error_Code="EntryNotFound"), spec, "https://hub.test", False)
    assert refused is not None and refused.status == 2
    assert str(refused).startswith("model_file: 'q.gguf' is not a file of org/model@main on https://hub.test")
    listed = fetch.hub_refusal(404, headers(X_Error_Code="EntryNotFound", X_Error_Message="gone"), SPEC,
                               "https://hub.test", False, "https://hub.test/org/model/resolve/abc/sub/a%20b.json")
    assert listed is not None and listed.status == 1 and "EntryNotFound (sub/a b.json): gone" in str(listed)


@pytest.mark.parametrize(("status", "answer"), [(200, {}), (302, {}), (500, {}), (502, {"X-Error-Message": "bad"}),
                                                (404, {})])
def test_hub_refusal_is_none_when_the_hub_did_not_say_why(status, answer):
    assert fetch.hub_refusal(status, headers(**answer), SPEC, "https://hub.test", False) is None


# --- the token read through labwright.schema.env, on a guest without labwright ----------------------------------------

def bare_probe(hub: StandinHub, tmp_path: Path, token: str, repo: str) -> subprocess.CompletedProcess[str]:
    """The probe as a guest without labwright runs it: the deploy's runner_source() (labwright.schema.env carried in
    its text) on stdin of this Python without site-packages (-I -S: standard library only, no pydantic)."""
    from labwright.deploys.model import runner_source

    spec = parse_spec({"repo": repo})
    return subprocess.run([sys.executable, "-I", "-S", "-", "--probe", "--spec", json.dumps(spec.as_json()),
                           "--cache", str(tmp_path / "models" / "hub"), "--models", str(tmp_path / "models"),
                           "--endpoint", hub.endpoint], input=runner_source(), capture_output=True, text=True,
                          timeout=120, env=clean_env(tmp_path, token))


def test_a_line_break_in_the_token_is_refused_in_one_line_naming_hf_token(hub, tmp_path):
    line = refusal(run(hub, tmp_path, token="hf_granted\ntoken", repo="lab/tiny"), 2)
    assert line.startswith("environment variable HF_TOKEN holds the control character '\\n'"), line
    assert "hf_granted" not in line and line.endswith("(nothing was downloaded)") and hub.requests == []
    proc = bare_probe(hub, tmp_path, "hf_granted\ntoken", "lab/tiny")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith("refused environment variable HF_TOKEN holds the control character"), proc.stdout
    assert hub.requests == []


def test_the_bare_probe_reads_the_token_through_the_carried_schema_env(hub, tmp_path):
    proc = bare_probe(hub, tmp_path, f"  {GRANTED}\n", "lab/gated")  # surrounding space and a final line break go
    assert (proc.returncode, proc.stderr, proc.stdout.strip()) == (0, "", "incomplete")
    assert {r.token for r in hub.requests} == {GRANTED}
