"""support.recorded_registry: the offline registry behind ``benchmarks/matrix_refresh.py --recorded``.

The CLI runs as the benchmark runs it, ``sys.executable -m labwright`` with a PATH that has no .venv/bin on it (as
``.venv/bin/python benchmarks/matrix_refresh.py`` is started): a cold refresh writes the feeds' files, the next one
is answered 304 throughout and says nothing was updated, and no request leaves 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from labwright.paths import packaged_matrix_dir
from support.recorded_registry import RecordedRegistry


def refresh(registry: RecordedRegistry, out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run([sys.executable, "-m", "labwright", "matrix", "refresh", "--out", str(out), "--index",
                           registry.index, "--pytorch-index", registry.pytorch, "--github-api", registry.github],
                          capture_output=True, text=True, env=env, timeout=300)


def test_a_cold_refresh_then_a_no_change_one_without_the_venv_on_path(tmp_path):
    for name in ("components.toml", "cuda.toml", "stacks.toml"):
        shutil.copy(packaged_matrix_dir() / name, tmp_path / name)
    with RecordedRegistry() as registry:
        cold = refresh(registry, tmp_path)
        assert cold.returncode == 0, cold.stderr
        assert "✓ torch: updated, newest " in cold.stdout and (tmp_path / "torch_pypi.toml").is_file()
        asked = registry.requests
        again = refresh(registry, tmp_path)
        assert again.returncode == 0, again.stderr
        assert "updated" not in again.stdout and "= torch: unchanged" in again.stdout, again.stdout
        assert registry.answered_304 >= 9  # every PyPI feed answered "not modified"
        assert registry.requests - asked <= asked


def test_it_serves_only_the_recorded_files():
    with RecordedRegistry() as registry:
        with urllib.request.urlopen(f"{registry.index}/torch/json", timeout=10) as answer:
            assert answer.status == 200 and answer.headers["ETag"] and b'"releases"' in answer.read()
        for path in ("/pypi/nope/json", "/files/..", "/pypi/../RECORDED/json", "/github/repos/a/b/releases",
                     "/pytorch/whl/cu130/torch/"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"{registry.root}{path}", timeout=10)
            assert refused.value.code == 404, path
