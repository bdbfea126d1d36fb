"""The tabbyAPI stand-in: a real git repository with two refs, and a main.py that serves and fails like tabbyAPI."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from support.tabbyapi_standin import (
    CONFIG_REF,
    OOM_LINE,
    SEED_REF,
    STARTUP_LINE,
    build_standin_repo,
)


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    return build_standin_repo(tmp_path_factory.mktemp("standin") / "tabbyAPI")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def test_two_tagged_commits_with_tabbyapis_paths(standin):
    assert git(standin.path, "tag").split() == [CONFIG_REF, SEED_REF]
    assert git(standin.path, "rev-list", "--count", "HEAD").strip() == "2"
    files = git(standin.path, "ls-tree", "-r", "--name-only", SEED_REF).split()
    for path in ("main.py", "backends/exllamav3/model.py", "config_sample.yml", "common/config_models.py"):
        assert path in files
    seed = git(standin.path, "show", f"{SEED_REF}:backends/exllamav3/model.py")
    config = git(standin.path, "show", f"{CONFIG_REF}:backends/exllamav3/model.py")
    assert "num_draft_tokens=self.draft_num_tokens,\n            )" in seed and "ngram_match_min" not in seed
    assert "ngram_match_min=self.ngram_match_min," in config


def test_commit_hashes_are_reproducible(standin, tmp_path):
    other = build_standin_repo(tmp_path / "again")
    assert git(other.path, "rev-parse", CONFIG_REF) == git(standin.path, "rev-parse", CONFIG_REF)


def start(tree: Path, config: str) -> subprocess.Popen[str]:
    (tree / "config.yml").write_text(config)
    return subprocess.Popen([sys.executable, "main.py"], cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def test_main_serves_health_and_models_after_the_startup_line(standin, tmp_path):
    tree = standin.checkout(SEED_REF, tmp_path / "t")
    proc = start(tree, "network:\n  host: 127.0.0.1\n  port: 0\nmodel:\n  model_name: tiny  # a comment\n")
    try:
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if STARTUP_LINE in line:
                break
        url = next(line for line in lines if "Uvicorn running on" in line).split()[-5]
        health = json.load(urllib.request.urlopen(f"{url}/health", timeout=5))
        models = json.load(urllib.request.urlopen(f"{url}/v1/models", timeout=5))
        assert health["status"] == "healthy"
        assert [m["id"] for m in models["data"]] == ["tiny"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize(("cache_size", "fails"), [(8192, True), (4096, False)])
def test_main_reports_insufficient_vram_above_the_configured_cache_size(standin, tmp_path, cache_size, fails):
    tree = standin.checkout(CONFIG_REF, tmp_path / "t")
    proc = start(tree, f"network:\n  port: 0\nmodel:\n  cache_size: {cache_size}\nstandin:\n  max_cache_size: 4096\n")
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        if fails:
            assert proc.wait(timeout=10) == 1
            assert OOM_LINE in first and str(cache_size) in first
        else:
            assert "Loaded model" in first and proc.poll() is None
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_clone_over_dumb_http_and_from_a_bundle(standin, tmp_path):
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format, *args):
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(standin.http_root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        subprocess.run(["git", "clone", "--quiet", url, str(tmp_path / "http")], check=True, capture_output=True)
    finally:
        server.shutdown()
    bundle = standin.bundle(tmp_path / "standin.bundle")
    subprocess.run(["git", "clone", "--quiet", str(bundle), str(tmp_path / "bundle")], check=True, capture_output=True)
    for clone in ("http", "bundle"):
        assert git(tmp_path / clone, "tag").split() == [CONFIG_REF, SEED_REF]
        assert git(tmp_path / clone, "rev-parse", SEED_REF) == git(standin.path, "rev-parse", SEED_REF)


def startup_log(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if STARTUP_LINE in line:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return "".join(lines)


NGRAM_LINE = "Using n-gram drafting with minimum match length"


def test_main_logs_ngram_drafting_as_patched_or_configured(standin, tmp_path):
    from labwright.tabbyapi.ngram import plan_ngram, read_tree

    seed = standin.checkout(SEED_REF, tmp_path / "seed")
    assert NGRAM_LINE not in startup_log(start(seed, "network:\n  port: 0\n"))
    (seed / "config.yml").unlink()
    change = plan_ngram(read_tree(seed), 3)
    Path(change.file).write_text(change.new_text or "")
    assert f"{NGRAM_LINE} 3\n" in startup_log(start(seed, "network:\n  port: 0\n"))

    config = standin.checkout(CONFIG_REF, tmp_path / "config")
    assert NGRAM_LINE not in startup_log(start(config, "network:\n  port: 0\n"))
    assert f"{NGRAM_LINE} 4\n" in startup_log(
        start(config, "network:\n  port: 0\ndraft_model:\n  draft_mode: ngram\n  ngram_match_min: 4\n"))
