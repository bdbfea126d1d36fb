"""The zipapp carried to targets runs on a bare interpreter: only the standard library and what it holds."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from labwright.stacks.bundle import MODULES, build_bundle


def bare(*args: str) -> subprocess.CompletedProcess[str]:
    # -I -S: no site-packages, no PYTHONPATH, no user site: as on a guest that has python3 and nothing else.
    return subprocess.run([sys.executable, "-I", "-S", *args], capture_output=True, text=True, timeout=120)


def test_the_bundle_is_deterministic_and_cached(tmp_path):
    first = build_bundle(tmp_path)
    assert build_bundle(tmp_path) == first
    names = zipfile.ZipFile(first).namelist()
    assert names[0] == "__main__.py" and all(f"labwright/{m}" in names for m in MODULES)
    assert "pip/__init__.py" in names and "elftools/__init__.py" in names and "packaging/version.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_every_target_module_imports_from_the_bundle_alone(tmp_path):
    bundle = build_bundle(tmp_path)
    modules = [f"labwright.{m[:-3].replace('/', '.')}".removesuffix(".__init__") for m in MODULES]
    code = f"import sys; sys.path.insert(0, {str(bundle)!r}); " + "; ".join(f"import {m}" for m in modules)
    proc = bare("-c", code)
    assert proc.returncode == 0, proc.stderr
    assert bare("-c", f"import sys; sys.path.insert(0, {str(bundle)!r}); import typer").returncode != 0


def test_its_command_line_and_its_pip_run(tmp_path):
    bundle = str(build_bundle(tmp_path))
    show = bare(bundle, "show", "--venv", str(tmp_path / "nothing"), "--root", str(tmp_path / "root"))
    assert show.returncode == 0, show.stderr
    assert "(absent)" in show.stdout and "no environment recorded" in show.stdout
    bad = bare(bundle, "rollback", "--venv", "relative")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("labwright: error: --venv 'relative' must be an absolute path")
    pip = bare(bundle, "pip", "--version")
    assert pip.returncode == 0 and pip.stdout.startswith("pip "), pip.stderr
