"""labwright.wheelhouse / labwright.litellm.wheelhouse: input checks and cache reuse (no download needed)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.litellm.wheelhouse import EXTRA, wheelhouse
from labwright.wheelhouse import download_wheelhouse


def test_a_complete_wheelhouse_is_reused_without_pip(tmp_path):
    target = tmp_path / "1.80.0-py3.11.2"
    target.mkdir()
    (target / ".complete").write_text(f"litellm[proxy]==1.80.0 {' '.join(EXTRA)} for CPython 3.11.2\n")
    (target / "requirements.lock").write_text("litellm[proxy]==1.80.0 --hash=sha256:" + "0" * 64 + "\n")
    assert wheelhouse("1.80.0", "3.11.2", root=tmp_path) == target


def test_a_wheelhouse_without_its_hashed_lock_is_not_complete(tmp_path, monkeypatch):
    """A wheelhouse made before locks (its marker, no requirements.lock) is made again, lock first."""
    from labwright import wheelhouse as wh

    target = tmp_path / "1.80.0-py3.11.2"
    target.mkdir()
    (target / ".complete").write_text(f"litellm[proxy]==1.80.0 {' '.join(EXTRA)} for CPython 3.11.2\n")
    asked: list[list[str]] = []
    monkeypatch.setattr(wh, "make_lock", lambda requirements, *a: asked.append(requirements) or "x==1 --hash=sha256:"
                        + "0" * 64 + "\n")
    monkeypatch.setattr(wh.ui, "run_with_progress", lambda command, *a, **k: asked.append(command))
    assert wheelhouse("1.80.0", "3.11.2", root=tmp_path) == target
    assert asked[0] == ["litellm[proxy]==1.80.0", *EXTRA] and "--require-hashes" in asked[1]
    assert (target / "requirements.lock").read_text().startswith("x==1 --hash=sha256:")


def test_the_wheelhouse_holds_prometheus_client_pinned():
    """The gateway's /metrics needs prometheus_client, which litellm[proxy] 1.80.0 does not require."""
    from labwright.litellm.wheelhouse import METRICS, plan

    assert METRICS == ["prometheus-client==0.20.0"]
    requirements, _ = plan("1.80.0", "3.11.2")
    assert requirements == ["litellm[proxy]==1.80.0", "async-timeout>=4.0.3", "prometheus-client==0.20.0"]


@pytest.mark.parametrize(("version", "python", "words"), [
    ("1.80.0", "bookworm", "--python 'bookworm'"),
    ("latest", "3.11.2", "--version 'latest'"),
])
def test_bad_input(tmp_path, version, python, words):
    with pytest.raises(BadInput, match=words):
        wheelhouse(version, python, root=tmp_path)
    assert not any(tmp_path.iterdir())


def test_generic_wheelhouse_checks_the_python_version_first(tmp_path):
    with pytest.raises(BadInput):
        download_wheelhouse(["fastapi"], "3", tmp_path / "x")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(("args", "words"), [
    (["--python", "abc"], "--python 'abc': not a CPython 3 version"),
    (["--python", "2.7"], "--python '2.7': not a CPython 3 version"),
    (["--python", "3.11.2", "--version", "x y"], "--version 'x y' is not a version"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_downloaded(capsys, args, words, tmp_path, monkeypatch):
    from labwright.cli import main as cli_main
    from labwright.litellm.wheelhouse import main

    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path))
    assert cli_main(["wheelhouse", "litellm", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("labwright: error: ") and words in err, err
    assert not any(tmp_path.iterdir())
    # the old spelling: the same line after one deprecation line
    assert main(args) == 2
    old = capsys.readouterr().err.splitlines()
    assert old == ["labwright: deprecated: python -m labwright.litellm.wheelhouse is labwright wheelhouse litellm "
                   "now; the old spelling goes in the next release", err.strip()]
    assert not any(tmp_path.iterdir())


def test_two_downloads_of_one_wheelhouse_at_once_run_pip_once(tmp_path, monkeypatch):
    """Two deploys (or two test workers) wanting the same wheelhouse: the second waits for the first and reuses what
    it made, instead of deleting the first's half-copied wheels and downloading again."""
    import threading

    from labwright import wheelhouse as wh

    started, release, calls = threading.Event(), threading.Event(), []

    def fake_pip(command, *args, **kwargs):
        calls.append(command)
        target = Path(command[command.index("-d") + 1])
        (target / "x-1-py3-none-any.whl").write_bytes(b"half a wheel")  # not a zip yet: the clean-up would delete it
        started.set()
        assert release.wait(30), "the test never let the first download finish"
        with zipfile.ZipFile(target / "x-1-py3-none-any.whl", "w") as whl:
            whl.writestr("x/__init__.py", "")

    monkeypatch.setattr(wh.ui, "run_with_progress", fake_pip)
    monkeypatch.setattr(wh, "make_lock", lambda *args: "x==1 --hash=sha256:" + "0" * 64 + "\n")
    target = tmp_path / "house"
    results: list[Path] = []
    first = threading.Thread(target=lambda: results.append(download_wheelhouse(["x==1"], "3.11.2", target)))
    first.start()
    assert started.wait(30)
    second = threading.Thread(target=lambda: results.append(download_wheelhouse(["x==1"], "3.11.2", target)))
    second.start()
    second.join(0.5)
    assert second.is_alive(), "the second download did not wait for the first"
    assert (target / "x-1-py3-none-any.whl").read_bytes() == b"half a wheel"  # not cleaned away under the first
    release.set()
    first.join(30)
    second.join(30)
    assert results == [target, target] and len(calls) == 1
    assert zipfile.is_zipfile(target / "x-1-py3-none-any.whl")
