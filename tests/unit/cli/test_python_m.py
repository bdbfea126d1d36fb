"""`python -m labwright` is the CLI with its exit codes (the device runs use it where no console script exists)."""

from __future__ import annotations

import subprocess
import sys


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "labwright", *args], capture_output=True, text=True, timeout=120)


def test_python_m_labwright_returns_the_cli_exit_codes():
    ok = run("matrix", "resolve", "--torch", "2.11.0", "--cuda", "13.0", "--python", "3.12", "--json")
    assert ok.returncode == 0, ok.stderr
    assert '"ok": true' in ok.stdout
    refused = run("matrix", "resolve", "--torch", "2.11.0", "--cuda", "13.0", "--python", "3.12",
                  "--driver", "535.104.05")
    assert refused.returncode == 1, (refused.returncode, refused.stderr)
    assert "too old for CUDA 13.0" in refused.stderr
    bad = run("matrix", "resolve", "--torch", "two", "--cuda", "13.0", "--python", "3.12")
    assert bad.returncode == 2, (bad.returncode, bad.stderr)
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("labwright: error:")
