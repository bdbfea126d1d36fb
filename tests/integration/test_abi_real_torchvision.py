"""`labwright stack verify` against real third-party torch extensions from the registries: torchvision wheels, each
pinned to one torch minor (Requires-Dist torch==X.Y.Z), installed with --no-deps beside a torch of ANOTHER minor, as
a pip that was told not to resolve (or a hand-made venv) leaves them.

One real pair from PyPI (skipped, saying so, only when PyPI cannot be reached; CI reaches it): torch 2.14.1 (its
CUDA 13 build, installed alone: its libraries' symbols are read, it is not imported: --no-import) with torchvision
0.28.0, built for torch 2.13.0: torch 2.14 changed c10::cuda::c10_cuda_check_implementation, which torchvision 0.28's
_C.so calls, so it is refused naming that symbol; torchvision 0.29.1, built for 2.14 (its _C_stable.so binds only
torch's stable C shim), is accepted. (A CPU pair from download.pytorch.org was left out: that index does not resolve
from the development machine, and a test never seen to pass is not kept.)

Downloads stay small and cached: the torch venvs are the ones the other verifier tests make once
(support.wheels.torch_venv), torchvision wheels are 2-8 MB and come from pip's cache after the first run.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from support.wheels import Venv, overlay_venv, torch_venv

pytestmark = pytest.mark.slow

PYPI = "https://pypi.org/simple"
#: torch 2.14 changed this function's signature; torchvision 0.28.0 (for torch 2.13) calls the 2.13 one.
CUDA_CHECK = "c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, unsigned int, bool)"


def reachable(index: str, package: str) -> None:
    """Skip (saying which and why) when the registry cannot be reached from here; anything else is a failure."""
    url = f"{index}/{package}/"
    try:
        with urllib.request.urlopen(url, timeout=20) as response:
            response.read(1)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        pytest.skip(f"{url} is unreachable from here ({getattr(exc, 'reason', exc)}): this test installs real "
                    "torchvision wheels from that registry (CI can reach it)")


def install_from(venv: Venv, index: str, requirement: str) -> float:
    """pip install --no-deps from one registry only (no machine pip.conf); pip's own cache keeps the download."""
    started = time.monotonic()
    venv.pip("install", "--no-deps", "--index-url", index, requirement)
    return time.monotonic() - started


def verify(cli_env, cache: Path, python: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    env = {**cli_env, "LABWRIGHT_CACHE": str(cache)}
    as_json = subprocess.run(["labwright", "stack", "verify", "--python", str(python), "--json", *extra],
                             capture_output=True, text=True, env=env, timeout=900)
    assert as_json.stdout.strip(), as_json.stderr
    human = subprocess.run(["labwright", "stack", "verify", "--python", str(python), *extra],
                           capture_output=True, text=True, env=env, timeout=900)
    assert human.returncode == as_json.returncode, (human.stderr, as_json.stderr)
    return human, json.loads(as_json.stdout)


def one_error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("labwright: error: ")]
    assert len(errors) == 1, stderr
    return errors[0]


def test_pypi_torchvision_for_torch_2_13_is_refused_beside_torch_2_14_and_the_matching_one_accepted(
        tmp_path, cli_env):
    reachable(PYPI, "torchvision")
    started = time.monotonic()
    try:
        torch_214 = torch_venv("2.14.1", no_deps=True)
    except RuntimeError as exc:
        if "No matching distribution" in str(exc):
            pytest.skip("torch 2.14.1 is not available to pip on this machine")
        raise

    old = overlay_venv(tmp_path / "tv-0.28", torch_214)
    install_from(old, PYPI, "torchvision==0.28.0")
    proc, data = verify(cli_env, tmp_path / "cache", old.python, "--no-import")
    assert proc.returncode == 1, proc.stderr
    assert data["torch"]["version"] == "2.14.1+cu130"
    broken = [m for m in data["modules"] if m["distribution"] == "torchvision"]
    assert broken and all(m["verdict"] == "missing-symbols" for m in broken), data["modules"]
    for module in broken:
        assert module["built_for_torch"] == "2.13.0" and module["built_for_source"] == "Requires-Dist torch==2.13.0"
        assert CUDA_CHECK in [s["demangled"] for s in module["missing"]["symbols"]]
        assert "built for torch 2.13.0 (Requires-Dist torch==2.13.0), installed torch 2.14.1+cu130" in \
            module["warnings"]
    assert CUDA_CHECK in proc.stdout  # the table's details name the symbol for a person too
    assert "extension(s) broken against torch 2.14.1+cu130" in one_error_line(proc.stderr)

    matching = overlay_venv(tmp_path / "tv-0.29", torch_214)
    install_from(matching, PYPI, "torchvision==0.29.1")
    proc, data = verify(cli_env, tmp_path / "cache", matching.python, "--no-import")
    assert proc.returncode == 0, proc.stderr
    checked = [m for m in data["modules"] if m["distribution"] == "torchvision"]
    assert checked and all(m["verdict"] == "ok" and m["missing"]["count"] == 0 for m in checked), checked
    assert data["summary"]["broken"] == 0
    print(f"\nPyPI torchvision pair: {time.monotonic() - started:.1f} s (torch venv, two installs, four verifies)")
