"""The model download's progress lines (labwright.models.fetch.DownloadProgress): the runner, run as the guest runs
it (the file as a script, the REAL huggingface_hub client) against the stand-in hub, with the transfer held half-way
so the test sees a line with the megabytes come so far; stderr stays empty on success and one line on failure."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from labwright.models import fetch
from labwright.models.spec import parse_spec
from labwright.testing.waiting import wait_for
from support.hf_endpoint import StandinHub, StandinRepo

RUNNER = Path(fetch.__file__)
MiB = 1024 * 1024
GGUF = os.urandom(24 * MiB)  # 25.2 MB: over two of huggingface_hub's 10 MiB chunks
TOTAL = f"{len(GGUF) / 1e6:.1f}"
DURATION = r"(\d+\.\d+s|\d+m\d\ds)"


@pytest.fixture
def hub():
    with StandinHub() as standin:
        standin.add(StandinRepo("lab/tiny-GGUF", {"tiny-Q8_0.gguf": GGUF, "README.md": b"gguf\n"}))
        yield standin


def start(hub: StandinHub, models: Path, **data: object) -> subprocess.Popen[str]:
    spec = parse_spec({"repo": "lab/tiny-GGUF", "file": "tiny-Q8_0.gguf", **data})
    env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(models.parent / "hf-home"),
           "LABWRIGHT_PROGRESS_INTERVAL": "0.2"}
    env.pop("HF_TOKEN", None)
    env.pop("LABWRIGHT_PROGRESS", None)
    return subprocess.Popen([sys.executable, str(RUNNER), "--spec", json.dumps(spec.as_json()), "--cache",
                             str(models / "hub"), "--models", str(models)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_a_model_download_says_megabytes_of_the_total_the_rate_and_how_long_it_took(hub, tmp_path):
    hub.stall["tiny-Q8_0.gguf"] = 12 * MiB  # past one 10 MiB chunk: a part of the file is on disk, the rest waits
    proc = start(hub, tmp_path / "models")
    lines: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(line.rstrip("\n") for line in proc.stdout), daemon=True)
    reader.start()
    what = "download lab/tiny-GGUF@main"
    moving = re.compile(rf"… {re.escape(what)}: (\d+\.\d) of {TOTAL} MB \((\d+)%\), \d+\.\d MB/s \[{DURATION}\]")

    def a_line_with_bytes_come() -> bool:
        return any((m := moving.fullmatch(line)) is not None and float(m[1]) > 0 for line in list(lines))

    try:
        wait_for("a progress line with some of the 25.2 MB come while the stand-in hub holds the transfer",
                 a_line_with_bytes_come, timeout=120)
    finally:
        hub.release.set()
    proc.wait(timeout=300)
    reader.join(timeout=60)  # the reader has every stdout line (communicate() would take some of them)
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert proc.returncode == 0 and err == "", err
    assert lines[0] == f"… {what} (1 file(s), {TOTAL} MB)", lines
    assert re.fullmatch(rf"✓ {re.escape(what)} \({DURATION}\): {TOTAL} MB at \d+\.\d MB/s", lines[-2]), lines
    assert lines[-1].startswith("downloaded: "), lines
    # every line in between is a progress line, with at most 100%
    assert all((m := moving.fullmatch(line)) and int(m[2]) <= 100 for line in lines[1:-2]), lines


def test_nothing_to_come_is_no_progress_and_a_failure_stays_one_line_on_stderr(hub, tmp_path):
    models = tmp_path / "models"
    first = start(hub, models)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    # every file in huggingface_hub's cache already (the marker removed): no byte is to come, no progress line
    fetch.marker_path(models, parse_spec({"repo": "lab/tiny-GGUF", "file": "tiny-Q8_0.gguf"}).name).unlink()
    again = start(hub, models)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0 and out.startswith("downloaded: ") and "…" not in out, out
    # a transfer that keeps breaking: stderr is the one error line, the progress says on stdout that it failed
    hub.cut_always["tiny-Q8_0.gguf"] = 1 * MiB
    broken = start(hub, tmp_path / "other", name="other")
    out, err = broken.communicate(timeout=300)
    assert broken.returncode == 1, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("download of lab/tiny-GGUF@main from "), err
    assert out.splitlines()[0] == f"… download lab/tiny-GGUF@main (1 file(s), {TOTAL} MB)", out
    assert re.fullmatch(rf"✗ download lab/tiny-GGUF@main failed after {DURATION}", out.splitlines()[-1]), out
