"""Progress on the venv build and the wheel downloads (labwright.ui.InstallProgress through the stack build, the stack
fetch and the guest wheelhouse): a real venv and a real pip installing real wheels built here, a real ``pip download``
and real downloads from an HTTP server on 127.0.0.1. Each asserts the start line, the lines with counts (package N of
M, megabytes of the total and the rate) and the end line with the duration and what the step came to."""

from __future__ import annotations

import hashlib
import http.server
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright import ui
from labwright.errors import OperationFailed
from labwright.stacks import fetch as stack_fetch
from labwright.stacks.build import build
from labwright.stacks.fetch import LocalWheel, sha256_of
from labwright.stacks.plan import PlannedWheel, SwitchPlan
from labwright.wheelhouse import download_wheelhouse
from support.wheels import write_wheel

PURE = "py3-none-any"
DURATION = r"\((\d+\.\d+s|\d+m\d\ds)\)"  # what format_duration writes, in the end line's brackets


@pytest.fixture(autouse=True)
def every_update_a_line(monkeypatch):
    """Plain lines for every update (no terminal, no interval), so the test sees each count."""
    monkeypatch.delenv("LABWRIGHT_PROGRESS", raising=False)
    monkeypatch.setenv("LABWRIGHT_PROGRESS_INTERVAL", "0")
    monkeypatch.setattr(ui, "plain_lines", False)


def local_wheel(house: Path, name: str, version: str, requires: list[str] | None = None,
                padding: int = 0) -> LocalWheel:
    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n".encode()}
    if padding:  # incompressible bytes: a wheel big enough for pip to show its download progress (over 512 KB)
        files[f"{name}/blob.bin"] = os.urandom(padding)
    path = write_wheel(house, name, version, files, requires=requires, tag=PURE)
    sha, size = sha256_of(path)
    return LocalWheel(PlannedWheel(name, version, path.name, str(path), sha), path, sha, size, True)


def details(err: list[str], what: str) -> list[str]:
    """The progress details of step ``what`` (``… what: DETAIL [time]``), in order."""
    prefix = f"… {what}: "
    return [line[len(prefix):].rsplit(" [", 1)[0] for line in err if line.startswith(prefix)]


def end_line(err: list[str], what: str) -> str:
    ends = [line for line in err if line.startswith(f"✓ {what} (")]
    assert len(ends) == 1, err
    assert re.match(rf"✓ {re.escape(what)} {DURATION}", ends[0]), ends[0]
    return ends[0]


def test_the_venv_build_says_which_package_of_how_many_and_how_long_it_took(tmp_path, capsys):
    house = tmp_path / "wheelhouse"
    lwtorch = local_wheel(house, "lwtorch", "2.11.0", requires=["lwhelper>=1.0"])
    engine = local_wheel(house, "lwengine", "1.0.0", requires=["lwtorch==2.11.0"])
    helper = local_wheel(house, "lwhelper", "1.2.0")
    # the wheelhouse's own hashed lock for what the wheels require (labwright.stacks.build's second pass)
    (house / "requirements.lock").write_text(f"lwhelper==1.2.0 --hash=sha256:{helper.sha256}\n")
    plan = SwitchPlan("progress", str(tmp_path / "app" / ".venv"), f"{sys.version_info[0]}.{sys.version_info[1]}",
                      (lwtorch.wheel, engine.wheel), root=str(tmp_path / "stacks"))
    env_dir = tmp_path / "stacks" / plan.env_id
    env_dir.mkdir(parents=True)
    log: list[str] = []
    build(plan, [lwtorch, engine], env_dir, sys.executable, "pip", log.append)
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    # the wheels: one line per package, counted against the plan's wheels
    what = "install 2 wheel(s) with pip"
    assert f"… {what}" in err, err
    steps = details(err, what)
    assert any(d.startswith("package 1 of 2: lwtorch-2.11.0-py3-none-any.whl") for d in steps), steps
    assert any(d.startswith("package 2 of 2: lwengine-1.0.0-py3-none-any.whl") for d in steps), steps
    assert any(d.startswith("installing 2 package(s): ") for d in steps), steps
    assert end_line(err, what).endswith(": 2 package(s) installed")
    # the dependencies: lwhelper is the one package the second pass installs
    deps = "install the dependencies of the stack's wheels with pip"
    assert any(d.startswith("installing 1 package(s): lwhelper") for d in details(err, deps)), err
    assert end_line(err, deps).endswith(": 1 package(s) installed")
    # progress is on stderr only: stdout and the step log the caller reads are as before
    assert "…" not in captured.out and not any(line.startswith(("…", "✓")) for line in log), log


def test_a_failed_install_is_one_error_line_after_the_last_lines_of_the_installer(tmp_path, capsys):
    house = tmp_path / "wheelhouse"
    needs = local_wheel(house, "lwneeds", "1.0.0", requires=["lwabsent>=1"])
    # locked, but not in the wheelhouse: pip itself fails the second pass
    (house / "requirements.lock").write_text(f"lwabsent==1.0 --hash=sha256:{'0' * 64}\n")
    plan = SwitchPlan("broken", str(tmp_path / "app" / ".venv"), f"{sys.version_info[0]}.{sys.version_info[1]}",
                      (needs.wheel,), root=str(tmp_path / "stacks"))
    env_dir = tmp_path / "stacks" / plan.env_id
    env_dir.mkdir(parents=True)
    with pytest.raises(OperationFailed) as failed:
        build(plan, [needs], env_dir, sys.executable, "pip", lambda _: None)
    message = str(failed.value)
    assert "\n" not in message and message.startswith(
        f"install the dependencies of the stack's wheels with pip failed in {env_dir} (exit 1): ERROR: "), message
    err = capsys.readouterr().err.splitlines()
    assert any(line.startswith("  | ERROR: ") for line in err), err  # what pip said, for the person reading
    assert err[-1].startswith("✗ install the dependencies of the stack's wheels with pip failed after "), err


class Served:
    """Files served over HTTP on 127.0.0.1 (``/simple/NAME/`` index pages for pip, the files themselves)."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = served.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/html" if self.path.endswith("/") else
                                 "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                # in pieces, as a network delivers them: the reader sees the bytes come
                for start in range(0, len(body), 1 << 18):
                    self.wfile.write(body[start:start + (1 << 18)])

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Served:
        # shutdown() waits for the loop's next poll: every 0.02 s, not the default 0.5 s
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def index(tmp_path) -> Iterator[tuple[Served, dict[str, int]]]:
    """A package index with two wheels: lwbig (3 MB, so pip shows its download progress) and lwsmall."""
    house = tmp_path / "served"
    sizes = {}
    files: dict[str, bytes] = {}
    for name, padding in (("lwbig", 3 * 10**6), ("lwsmall", 0)):
        wheel = local_wheel(house, name, "1.0", requires=["lwsmall"] if name == "lwbig" else None, padding=padding)
        data = wheel.path.read_bytes()
        sizes[name] = len(data)
        files[f"/files/{wheel.path.name}"] = data
        digest = hashlib.sha256(data).hexdigest()
        files[f"/simple/{name}/"] = (f'<html><body><a href="/files/{wheel.path.name}#sha256={digest}">'
                                     f"{wheel.path.name}</a></body></html>").encode()
    with Served(files) as served:
        yield served, sizes


def test_a_wheelhouse_download_says_megabytes_of_the_total_and_the_rate(tmp_path, capsys, monkeypatch, index):
    served, sizes = index
    monkeypatch.setenv("PIP_INDEX_URL", f"{served.url}/simple/")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")  # a cached wheel comes with no download progress
    python = f"{sys.version_info[0]}.{sys.version_info[1]}.0"
    target = download_wheelhouse(["lwbig==1.0"], python, tmp_path / "house", index_url=f"{served.url}/simple/")
    assert sorted(p.name for p in target.glob("*.whl")) == ["lwbig-1.0-py3-none-any.whl",
                                                           "lwsmall-1.0-py3-none-any.whl"]
    err = capsys.readouterr().err.splitlines()
    what = f"download wheels for lwbig==1.0 (CPython {python})"
    assert err[0] == f"… {what}", err
    steps = details(err, what)
    # Downloaded against the hashed lock (labwright.locks): each package is a pinned line of it, dependencies too.
    assert "package 1: lwbig==1.0" in steps and "package 2: lwsmall==1.0" in steps, steps
    total = f"{sizes['lwbig'] / 1e6:.1f}"
    moving = [d for d in steps if d.startswith("package 1: lwbig==1.0: ") and f" of {total} MB (" in d]
    assert moving, steps
    # every such line: bytes so far of the total, the rate, and what has come in all
    assert all(re.fullmatch(rf"package 1: lwbig==1\.0: \d+\.\d of {total} MB \(\d+%\), \d+\.\d MB/s; "
                            r"\d+\.\d MB downloaded", d) for d in moving), moving
    assert moving[-1].startswith(f"package 1: lwbig==1.0: {total} of {total} MB (100%)"), moving
    assert end_line(err, what).endswith(f": 2 package(s), {total} MB downloaded"), err


def test_a_failed_wheelhouse_download_is_one_line_naming_pips_error(tmp_path, monkeypatch, index):
    served, _ = index
    monkeypatch.setenv("PIP_INDEX_URL", f"{served.url}/simple/")
    with pytest.raises(OperationFailed) as failed:
        download_wheelhouse(["lwnowhere==1.0"], "3.11.2", tmp_path / "house", index_url=f"{served.url}/simple/")
    message = str(failed.value)
    # The lock is resolved first (labwright.locks): pip's own error, in one line, names what it could not find.
    assert "\n" not in message, message
    assert message.startswith("cannot resolve lwnowhere==1.0 for CPython 3.11.2 from ") and \
        "ERROR: No matching distribution found for lwnowhere==1.0" in message, message
    assert not (tmp_path / "house" / ".complete").exists()


def test_a_stack_wheel_download_says_megabytes_of_the_total_the_rate_and_the_size_at_the_end(tmp_path, capsys,
                                                                                              index):
    served, sizes = index
    name = "lwbig-1.0-py3-none-any.whl"
    data = served.files[f"/files/{name}"]
    planned = PlannedWheel("lwbig", "1.0", name, f"{served.url}/files/{name}", hashlib.sha256(data).hexdigest())
    got = stack_fetch.fetch(planned, tmp_path / "wheels", lambda _: None)
    assert got.path.read_bytes() == data and got.checked and got.size == sizes["lwbig"]
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"… download {name}"
    total = f"{sizes['lwbig'] / 1e6:.1f}"
    steps = details(err, f"download {name}")
    assert steps and all(re.fullmatch(rf"\d+\.\d of {total} MB \(\d+%\), \d+\.\d MB/s", d) for d in steps), steps
    assert steps[-1].startswith(f"{total} of {total} MB (100%)"), steps
    assert re.fullmatch(rf"✓ download {re.escape(name)} {DURATION}: {total} MB at \d+\.\d MB/s", err[-1]), err


@pytest.mark.parametrize("lines, last", [
    # pip installing local wheels (the plan's first pass)
    (["Processing /w/torch-2.8.0-cp311-cp311-linux_x86_64.whl", "Processing /w/flash_attn-2.8.3-cp311.whl",
      "Installing collected packages: torch, flash_attn"], "installing 2 package(s): torch, flash_attn"),
    # uv
    (["Resolved 7 packages in 12ms", "Downloading torch (845.3MiB)"], "downloading torch (845.3MiB)"),
    (["Prepared 7 packages in 1.02s", "Installed 7 packages in 310ms"], "Installed 7 packages in 310ms"),
])
def test_install_progress_reads_pip_and_uv(lines, last):
    parse = ui.InstallProgress(2)
    got = [parse(line) for line in lines]
    assert got[-1] == last


def test_install_progress_counts_what_was_downloaded():
    parse = ui.InstallProgress()
    parse("Collecting torch==2.8.0")
    parse("  Downloading torch-2.8.0-cp311-cp311-manylinux_2_28_x86_64.whl (888.1 MB)")
    assert parse("Progress 444050000 of 888100000").startswith(
        "package 1: torch==2.8.0: 444.1 of 888.1 MB (50%), ")
    parse("Progress 888100000 of 888100000")
    parse("Collecting sympy")
    parse("  Downloading sympy-1.14.0-py3-none-any.whl (6.3 MB)")  # no raw lines: the size pip announced counts
    parse("Installing collected packages: sympy, torch")
    assert parse.summary() == "2 package(s) installed, 894.4 MB downloaded"


def test_the_bundle_carries_the_progress_module():
    from labwright.stacks.bundle import MODULES

    assert "ui.py" in MODULES  # the stack build on a guest reports through it


@pytest.mark.parametrize("version, raw", [("26.3", True), ("24.1", True), ("24.0", False), ("23.0.1", False),
                                          ("", False), (None, False), ("dev", False)])
def test_pip_gets_raw_progress_only_where_it_has_it(version, raw):
    assert ui.pip_has_raw_progress(version) is raw


def test_the_installers_pip_is_asked_for_raw_progress():
    import pip

    from labwright.stacks.build import installer_command

    assert ui.pip_has_raw_progress(pip.__version__), f"pip {pip.__version__}: the venv's pip is 24.1 or later"
    _, argv = installer_command("/x/venv/bin/python", "pip")
    assert argv[-3:] == ["install", "--progress-bar", "raw"], argv
