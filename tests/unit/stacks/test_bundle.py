"""The zipapp carried to targets runs on a bare interpreter: only the standard library and what it holds."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import labwright
from labwright.stacks.bundle import CONTROLLER_ONLY, MODULES, OPTIONAL, THIRD_PARTY, build_bundle


def bare(*args: str) -> subprocess.CompletedProcess[str]:
    # -I -S: no site-packages, no PYTHONPATH, no user site: as on a guest that has python3 and nothing else.
    return subprocess.run([sys.executable, "-I", "-S", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One bundle cache for the module: the bundle is built (its bytecode compiled) once, then found by its digest."""
    return tmp_path_factory.mktemp("bundles")


def test_the_bundle_is_deterministic_and_cached(tmp_path, cache):
    first = build_bundle(cache)
    assert build_bundle(cache) == first
    assert build_bundle(tmp_path).read_bytes() == first.read_bytes()  # built again elsewhere: the same bytes
    names = zipfile.ZipFile(first).namelist()
    assert names[0] == "__main__.py" and all(f"labwright/{m}" in names for m in MODULES)
    assert "pip/__init__.py" in names and "elftools/__init__.py" in names and "packaging/version.py" in names
    assert not [n for n in names if "__pycache__" in n]  # nothing of the controller's own caches
    # Bytecode beside every module but __main__.py, none without its source: this interpreter's, unchecked (PEP 552)
    assert {n for n in names if n.endswith(".pyc")} == {n + "c" for n in names if n.endswith(".py")} - {"__main__.pyc"}
    with zipfile.ZipFile(first) as archive:
        pyc, source = archive.read("labwright/stacks/switch.pyc"), archive.read("labwright/stacks/switch.py")
    assert pyc[:16] == importlib.util.MAGIC_NUMBER + b"\1\0\0\0" + importlib.util.source_hash(source)


def test_a_target_of_another_python_compiles_the_sources_instead(tmp_path, cache):
    """zipimport reads a .pyc of another magic number (another Python minor version on the target) as not its own
    and compiles the .py beside it: the same bundle with every .pyc's magic changed still runs, pip included."""
    foreign = tmp_path / "foreign.pyz"
    with zipfile.ZipFile(build_bundle(cache)) as original, zipfile.ZipFile(foreign, "w") as copy:
        for info in original.infolist():
            data = original.read(info)
            copy.writestr(info, b"\xff\xff\r\n" + data[4:] if info.filename.endswith(".pyc") else data)
    show = bare(str(foreign), "show", "--venv", str(tmp_path / "nothing"), "--root", str(tmp_path / "root"))
    assert show.returncode == 0 and "(absent)" in show.stdout, show.stderr
    pip = bare(str(foreign), "pip", "--version")
    assert pip.returncode == 0 and pip.stdout.startswith("pip "), pip.stderr


def _imports(source: str) -> list[tuple[int, str]]:
    """Every absolute module name an import statement names, at any depth (a function's own imports included: the
    target reaches them only when it calls that function, which an import test never does)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_every_import_a_bundled_module_makes_is_bundled_or_declared_controller_only():
    """The class behind CI at 6d041d3 (paths imported schema.checks inside a function; the bundle lacked it and every
    stack switch in a guest died with ModuleNotFoundError): any labwright module a bundled one imports is bundled
    too, unless bundle.CONTROLLER_ONLY names it with the reason; third-party imports are bundled packages, the
    standard library, or controller-only (pyinfra)."""
    package = Path(labwright.__file__).parent
    bundled = {f"labwright.{m[:-3].replace('/', '.')}".removesuffix(".__init__") for m in MODULES}
    carried = {*THIRD_PARTY, *OPTIONAL}
    missing = []
    for module in MODULES:
        for line, name in _imports((package / module).read_text()):
            top = name.split(".")[0]
            if top == "labwright":
                path = package.joinpath(*name.split(".")[1:])
                is_module = path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()
                if is_module and name not in bundled and name not in CONTROLLER_ONLY:
                    missing.append(f"{module}:{line} imports {name}")
            elif top not in sys.stdlib_module_names and top not in carried and top not in CONTROLLER_ONLY:
                missing.append(f"{module}:{line} imports {name} (third party, not carried)")
    assert not missing, "add to bundle.MODULES (or CONTROLLER_ONLY, with the reason): " + "; ".join(missing)
    assert not bundled & set(CONTROLLER_ONLY), "a bundled module cannot be controller-only"


def test_every_target_module_imports_from_the_bundle_alone(cache):
    bundle = build_bundle(cache)
    modules = [f"labwright.{m[:-3].replace('/', '.')}".removesuffix(".__init__") for m in MODULES]
    code = f"import sys; sys.path.insert(0, {str(bundle)!r}); " + "; ".join(f"import {m}" for m in modules)
    proc = bare("-c", code)
    assert proc.returncode == 0, proc.stderr
    assert bare("-c", f"import sys; sys.path.insert(0, {str(bundle)!r}); import typer").returncode != 0


def test_its_command_line_and_its_pip_run(tmp_path, cache):
    bundle = str(build_bundle(cache))
    show = bare(bundle, "show", "--venv", str(tmp_path / "nothing"), "--root", str(tmp_path / "root"))
    assert show.returncode == 0, show.stderr
    assert "(absent)" in show.stdout and "no environment recorded" in show.stdout
    bad = bare(bundle, "rollback", "--venv", "relative")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("labwright: error: --venv 'relative' must be an absolute path")
    pip = bare(bundle, "pip", "--version")
    assert pip.returncode == 0 and pip.stdout.startswith("pip "), pip.stderr


def test_progress_settings_read_in_the_bundle(cache):
    """ui reads LABWRIGHT_PROGRESS_INTERVAL through labwright.schema.env, which the bundle carries (issue 33)."""
    bundle = build_bundle(cache)
    code = (f"import sys; sys.path.insert(0, {str(bundle)!r}); from labwright import ui; "
            "print(ui._default_interval())")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60,
                          env={"LABWRIGHT_PROGRESS_INTERVAL": "5"})
    assert proc.returncode == 0 and proc.stdout.strip() == "5.0", proc.stderr
