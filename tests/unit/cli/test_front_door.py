"""One front door (issue 32 item 5): the `python -m` programs as typer commands (`build llamacpp`, `model fetch`,
`model tiny`, `wheelhouse litellm|openwebui|requirements|stack`), their --dry and --json, and the old `python -m` forms
still working for one release with one deprecation line."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labwright.cli import main
from labwright.models.spec import parse_spec
from support.cli_docs import assert_documented
from support.hf_endpoint import StandinHub, StandinRepo


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_build_llamacpp_dry_says_where_and_whether_cached(capsys, cache):
    code, out, err = run(capsys, "build", "llamacpp", "--dry", "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert_documented("build llamacpp", doc)
    binary = cache / "llama" / "0.3.36" / "llama-server"
    assert doc == {"binary": str(binary), "cached": False, "built": False, "dry": True, "cuda": None,
                   "architectures": [], "vulkan": False, "release": None}
    assert not cache.exists()
    code, out, err = run(capsys, "build", "llamacpp", "--dry", "--arch", "8.6")
    assert code == 0 and out == f"would build: {cache}/llama/0.3.36/cuda13.0-sm86/bin/llama-server\n"
    # a build in the cache: found, not built again (nothing to download or compile)
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"\x7fELF")
    binary.with_name("llama-server.sha256").write_text(hashlib.sha256(b"\x7fELF").hexdigest() + "\n")
    code, out, err = run(capsys, "build", "llamacpp", "--json")
    assert code == 0 and json.loads(out) | {"binary": ""} == {"binary": "", "cached": True, "built": False,
                                                             "dry": False, "cuda": None, "architectures": [],
                                                             "vulkan": False, "release": None}
    code, out, err = run(capsys, "build", "llamacpp")
    assert (code, out) == (0, f"{binary}\n")


def test_build_llamacpp_vulkan_dry_says_where_and_builds_nothing(capsys, cache):
    """--vulkan: the Vulkan build's cache entry (keyed by source and toolchain: vulkan-trixie), nothing made."""
    code, out, err = run(capsys, "build", "llamacpp", "--vulkan", "--dry", "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert_documented("build llamacpp", doc)
    assert doc == {"binary": f"{cache}/llama/0.3.36/vulkan-trixie/bin/llama-server", "cached": False,
                   "built": False, "dry": True, "cuda": None, "architectures": [], "vulkan": True,
                   "release": None}
    assert not cache.exists()
    # a cached build (its manifest written last) is found and not built again: no build box is asked for
    manifest = cache / "llama" / "0.3.36" / "vulkan-trixie" / "manifest.json"
    (manifest.parent / "bin").mkdir(parents=True)
    (manifest.parent / "bin" / "llama-server").write_bytes(b"\x7fELF")
    manifest.write_text(json.dumps({"files": {"bin/llama-server": hashlib.sha256(b"\x7fELF").hexdigest()}}))
    code, out, err = run(capsys, "build", "llamacpp", "--vulkan")
    assert (code, out) == (0, f"{manifest.parent}/bin/llama-server\n")
    assert not (manifest.parent.parent / "llama_cpp_python-0.3.36.tar.gz").exists()  # nothing fetched, nothing built


def test_build_llamacpp_vulkan_with_cuda_options_is_one_line(capsys, cache):
    code, out, err = run(capsys, "build", "llamacpp", "--vulkan", "--arch", "8.6")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--vulkan" in err and "not both" in err
    assert not cache.exists()


def test_model_tiny_writes_the_gguf_and_dry_writes_nothing(capsys, tmp_path):
    target = tmp_path / "models" / "tiny.gguf"
    code, out, err = run(capsys, "model", "tiny", str(target), "--dry", "--json")
    assert code == 0 and json.loads(out) == {"path": str(target), "bytes": None, "context_length": 1 << 19,
                                             "seed": 0, "dry": True}
    assert not target.parent.exists()
    code, out, err = run(capsys, "model", "tiny", str(target), "--context-length", "4096", "--json")
    doc = json.loads(out)
    assert_documented("model tiny", doc)
    assert code == 0 and doc["bytes"] == target.stat().st_size > 1_000_000
    assert target.read_bytes()[:4] == b"GGUF"
    code, out, err = run(capsys, "model", "tiny", str(tmp_path))
    assert code == 2 and out == "" and err == (f"labwright: error: {tmp_path} is a directory: give the GGUF file's "
                                               f"path, e.g. {tmp_path / 'tiny.gguf'}\n")
    # a device, dry or not (the file is renamed over PATH): refused before anything is said
    code, out, err = run(capsys, "model", "tiny", "/dev/null", "--dry")
    assert code == 2 and out == "" and "/dev/null exists and is not a regular file" in err and err.count("\n") == 1


def test_model_fetch_downloads_verifies_and_finds_it_complete(capsys, tmp_path, monkeypatch):
    models = tmp_path / "models"
    with StandinHub() as hub:
        hub.add(StandinRepo("lab/tiny-GGUF", {"tiny-Q8_0.gguf": b"GGUF" + bytes(4096), "README.md": b"gguf\n"}))
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        args = ["model", "fetch", "lab/tiny-GGUF", "--file", "tiny-Q8_0.gguf", "--name", "tiny", "--models",
                str(models), "--json"]
        code, out, err = run(capsys, *args, "--dry")
        assert code == 0 and json.loads(out)["complete"] is False and not models.exists()
        code, out, err = run(capsys, *args)
        doc = json.loads(out)
        assert_documented("model fetch", doc)
        assert code == 0, err
        assert (doc["complete"], doc["downloaded"], doc["files"], doc["bytes"]) == (True, True, 1, 4100)
        assert (models / "tiny" / "tiny-Q8_0.gguf").read_bytes()[:4] == b"GGUF"
        assert doc["spec"] == parse_spec({"repo": "lab/tiny-GGUF", "file": "tiny-Q8_0.gguf", "name": "tiny"}).as_json()
        code, out, err = run(capsys, *args)  # complete: found without asking the Hub
        assert code == 0 and json.loads(out)["downloaded"] is False
        code, out, err = run(capsys, "model", "fetch", "lab/nope", "--models", str(models))
        assert code == 2 and out == "" and err.count("\n") == 1 and "REPO: 'lab/nope' is not a repo" in err


def test_model_fetch_asks_the_hub_hf_endpoint_names_even_after_huggingface_hub_was_imported(capsys, tmp_path,
                                                                                             monkeypatch):
    """huggingface_hub reads HF_ENDPOINT once, at its import (constants.py): a process (a test run, a pyinfra deploy)
    that imported it before the variable was set must still download from the endpoint the variable names."""
    from huggingface_hub import constants

    frozen = "http://127.0.0.1:9"  # what an import with another HF_ENDPOINT froze (constants.py 69-70)
    monkeypatch.setattr(constants, "ENDPOINT", frozen)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", frozen + "/{repo_id}/resolve/{revision}/{filename}")
    with StandinHub() as hub:
        hub.add(StandinRepo("lab/tiny-GGUF", {"tiny-Q8_0.gguf": b"GGUF" + bytes(64)}))
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        code, out, err = run(capsys, "model", "fetch", "lab/tiny-GGUF", "--file", "tiny-Q8_0.gguf", "--name", "tiny",
                             "--models", str(tmp_path / "models"), "--json")
    assert code == 0 and json.loads(out)["complete"] is True, err


@pytest.mark.parametrize("argv, line", [
    (["model", "fetch", "lab/x", "--revision", "a b"], "labwright: error: --revision: 'a b' is not a branch or tag"),
    (["model", "fetch", "lab/x", "--file", "x.txt"], "labwright: error: --file: 'x.txt' is not a .gguf file"),
    (["model", "tiny", "t.gguf", "--context-length", "0"], "labwright: error: --context-length 0: give 16 to"),
    (["wheelhouse", "requirements", "--python", "3.11.2", "--out", "w", "x y z"],
     "labwright: error: requirement 'x y z': not a requirement"),
    (["wheelhouse", "openwebui", "--python", "3.11.2", "--torch-find-links", "nowhere"],
     "labwright: error: --torch-find-links 'nowhere': not a directory or http(s) URL"),
])
def test_bad_input_is_one_line_exit_2(argv, line, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *argv, "--dry")
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(line), err
    assert list(tmp_path.iterdir()) == []


def test_wheelhouse_dry_and_a_complete_one_found_without_pip(capsys, cache):
    code, out, err = run(capsys, "wheelhouse", "litellm", "--python", "3.11.2", "--dry", "--json")
    doc = json.loads(out)
    assert_documented("wheelhouse litellm", doc)
    target = cache / "litellm" / "1.80.0-py3.11.2"
    assert (code, doc["directory"], doc["complete"], doc["downloaded"]) == (0, str(target), False, False)
    wanted = ["litellm[proxy]==1.80.0", "async-timeout>=4.0.3", "prometheus-client==0.20.0"]
    assert doc["requirements"] == wanted and not cache.exists()
    # what a finished download leaves: the lock and the marker naming these requirements
    target.mkdir(parents=True)
    (target / "requirements.lock").write_text("")
    (target / ".complete").write_text(f"{' '.join(wanted)} for CPython 3.11.2\n")
    code, out, err = run(capsys, "wheelhouse", "litellm", "--python", "3.11.2")
    assert (code, out, err) == (0, f"{target}\n", "")
    code, out, err = run(capsys, "wheelhouse", "requirements", "--python", "3.11.2", "--out", str(target), "--dry",
                         *wanted)
    assert (code, out) == (0, f"{target}\n")


def test_wheelhouse_stack_dry_plans_the_lock_and_writes_nothing(capsys, tmp_path, monkeypatch):
    from support.pinned_matrix import pinned_matrix

    monkeypatch.setenv("LABWRIGHT_MATRIX_DIR", str(pinned_matrix(tmp_path / "matrix")))
    house = tmp_path / "wheels"
    house.mkdir()
    code, out, err = run(capsys, "wheelhouse", "stack", "--stack", "A", "--out", str(house), "--dry", "--json")
    assert code == 0 and err == "", err
    doc = json.loads(out)
    assert_documented("wheelhouse stack", doc)
    assert (doc["stack"], doc["lock"], doc["written"], doc["dry"]) == ("A", str(house / "requirements.lock"), False,
                                                                        True)
    assert doc["python"] == "3.12" and any(w.startswith("torch-2.9.0") for w in doc["wheels"])
    code, out, err = run(capsys, "wheelhouse", "stack", "--stack", "A", "--out", str(house / "x.lock"), "--dry")
    assert code == 0 and out.startswith("would write: the hashed lock of what stack A's ") and \
        out.rstrip().endswith(f" to {house / 'x.lock'}"), out
    assert list(house.iterdir()) == []
    for argv, line in ((["--stack", "no-such", "--out", str(house)], "labwright: error: "),
                       (["--stack", "A", "--out", str(house / "no" / "x.lock")], f"labwright: error: --out {house}"),
                       (["--stack", "A", "--out", str(house), "--torch", "x y"], "labwright: error: ")):
        code, out, err = run(capsys, "wheelhouse", "stack", *argv, "--dry")
        assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(line), err
    assert list(house.iterdir()) == []


def test_the_old_dependency_lock_module_still_works_with_one_deprecation_line(tmp_path):
    from support.pinned_matrix import pinned_matrix

    env = {**os.environ, "LABWRIGHT_CACHE": str(tmp_path / "cache"),
           "LABWRIGHT_MATRIX_DIR": str(pinned_matrix(tmp_path / "matrix"))}
    proc = subprocess.run([sys.executable, "-m", "labwright.stacks.dependency_lock", "--stack", "A", "--out", ".",
                           "--dry"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.stderr == ("labwright: deprecated: python -m labwright.stacks.dependency_lock is labwright wheelhouse "
                           "stack now; the old spelling goes in the next release\n")
    assert proc.returncode == 0 and proc.stdout.startswith("would write: "), proc.stdout
    # Nothing downloaded, no lock written; the cache holds at most the matrix's parse (textio.parse_toml_cached)
    cache = tmp_path / "cache"
    assert not cache.exists() or [p.name for p in cache.iterdir()] == ["toml"], list(cache.rglob("*"))
    assert not (tmp_path / "requirements.lock").exists()


@pytest.mark.parametrize("module, new, args", [
    ("labwright.llamacpp.build", "labwright build llamacpp", ["--dry"]),
    ("labwright.llamacpp.tiny_model", "labwright model tiny", ["t.gguf", "--dry"]),
    ("labwright.litellm.wheelhouse", "labwright wheelhouse litellm", ["--python", "3.11.2", "--dry"]),
    ("labwright.openwebui.wheelhouse", "labwright wheelhouse openwebui", ["--python", "3.11.2", "--dry"]),
    ("labwright.wheelhouse", "labwright wheelhouse requirements", ["--python", "3.11.2", "--out", "w", "x==1",
                                                                   "--dry"]),
    ("labwright.models.fetch", "labwright model fetch", ["--check", "--spec", '{"repo": "a/b", "revision": "main", '
                                                         '"name": "b"}', "--cache", "hub", "--models", "m"]),
])
def test_the_old_python_m_forms_still_work_with_one_deprecation_line(module, new, args, tmp_path):
    env = {**os.environ, "LABWRIGHT_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.stderr == (f"labwright: deprecated: python -m {module} is {new} now; the old spelling goes in the "
                           "next release\n")
    assert proc.returncode == (3 if module.endswith("fetch") else 0) and proc.stdout.strip(), proc.stdout
    assert not (tmp_path / "cache").exists()
