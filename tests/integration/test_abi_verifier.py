"""`labwright stack verify` on real venvs, with real wheels installed by real pip, imported for real.

The seed's story in miniature: an extension wheel compiled against torch "2.9" (a stand-in whose libc10.so is
compiled here) keeps "being installed" after torch is upgraded to "2.11" (find_spec finds it), yet importing
it fails with "undefined symbol"; the verifier names the symbols; the wheel rebuilt for 2.11 passes. Then the
same against the real torch 2.13.0 CPU wheel, with an extension compiled by torch.utils.cpp_extension.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

from labwright.matrix.abi import verify_python
from labwright.matrix.abi_cache import AbiCache
from support.wheels import (
    STANDIN_EXTENSION,
    StandinTorch,
    Venv,
    build_standin_extension,
    build_standin_torch,
    build_torch_extension_wheel,
    compile_shared,
    ext_suffix,
    overlay_venv,
    torch_venv,
    write_wheel,
)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the wheels")]


@dataclass
class Wheelhouse:
    path: Path
    v1: StandinTorch  # torch 2.9.0: c10::cuda::SetDevice(int), c10::detail::legacy_api(int)
    v2: StandinTorch  # torch 2.11.0: SetDevice(signed char), legacy_api removed


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Wheelhouse:
    root = tmp_path_factory.mktemp("wheelhouse")
    house = root / "wheels"
    v1 = build_standin_torch(house, root / "build", "2.9.0", api=1)
    v2 = build_standin_torch(house, root / "build", "2.11.0", api=2)
    build_standin_extension(house, root / "build", v1)  # standin_attn 1.0.0+torch2.9
    build_standin_extension(house, root / "build", v2)  # standin_attn 1.0.0+torch2.11, the matching rebuild
    return Wheelhouse(house, v1, v2)


def verify_cli(cli_env, cache: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict | None]:
    env = {**cli_env, "LABWRIGHT_CACHE": str(cache)}
    proc = subprocess.run(["labwright", "stack", "verify", *args], capture_output=True, text=True, env=env,
                          timeout=600)
    data = json.loads(proc.stdout) if "--json" in args and proc.stdout.strip() else None
    return proc, data


def the_error(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("labwright: error: ")]
    assert len(errors) == 1 and stderr.splitlines()[-1] == errors[0], stderr
    return errors[0]


def test_torch_upgrade_breaks_an_extension_that_find_spec_still_finds(tmp_path, wheelhouse, cli_env):
    venv = Venv.create(tmp_path / "venv")
    venv.install(wheelhouse.path, "torch==2.9.0", "standin_attn==1.0.0+torch2.9")
    works = venv.run_python("import standin_attn; print(standin_attn._C.set_device(3))")
    assert works.returncode == 0 and works.stdout.strip() == "3", works.stderr

    proc, data = verify_cli(cli_env, tmp_path / "cache", "--python", str(venv.python), "--json")
    assert proc.returncode == 0, proc.stderr
    assert data["ok"] is True and data["torch"]["version"] == "2.9.0"
    [module] = data["modules"]
    assert (module["module"], module["verdict"], module["built_for_torch"]) == ("standin_attn._C", "ok", "2.9")
    assert module["import"] == {"checked": True, "ok": True, "error": None, "cached": False}

    # The upgrade: pip replaces torch and leaves the extension built for 2.9 in place.
    venv.install(wheelhouse.path, "torch==2.11.0")
    spec = venv.run_python("import importlib.util; print(importlib.util.find_spec('standin_attn') is not None)")
    assert spec.stdout.strip() == "True"  # what tabbyAPI's optional-dependency check sees: "installed"
    broken = venv.run_python("import standin_attn")
    assert broken.returncode != 0 and "undefined symbol" in broken.stderr

    proc, data = verify_cli(cli_env, tmp_path / "cache", "--python", str(venv.python), "--json")
    assert proc.returncode == 1
    assert "1 of 1 extension(s) broken against torch 2.11.0" in the_error(proc.stderr)
    assert data["ok"] is False and data["summary"]["broken"] == 1
    [module] = data["modules"]
    assert module["verdict"] == "missing-symbols"
    missing = {m["demangled"]: m for m in module["missing"]["symbols"]}
    assert set(missing) == {"c10::cuda::SetDevice(int)", "c10::detail::legacy_api(int)"}
    assert missing["c10::cuda::SetDevice(int)"]["mangled"] == "_ZN3c104cuda9SetDeviceEi"
    assert missing["c10::cuda::SetDevice(int)"]["torch_has_instead"] == ["c10::cuda::SetDevice(signed char)"]
    assert module["import"]["ok"] is False and "undefined symbol: _ZN3c10" in module["import"]["error"]
    assert any("built for torch 2.9" in w and "installed torch 2.11.0" in w for w in module["warnings"])

    table, _ = verify_cli(cli_env, tmp_path / "cache", "--python", str(venv.python))
    assert table.returncode == 1
    assert "missing-symbols" in table.stdout
    assert "missing c10::cuda::SetDevice(int) (torch has c10::cuda::SetDevice(signed char))" in table.stdout

    # The fix the seed found: the same extension, built for the new torch.
    venv.install(wheelhouse.path, "standin_attn==1.0.0+torch2.11")
    proc, data = verify_cli(cli_env, tmp_path / "cache", "--python", str(venv.python), "--json")
    assert proc.returncode == 0, proc.stderr
    assert data["modules"][0]["verdict"] == "ok" and data["modules"][0]["built_for_torch"] == "2.11"
    assert venv.run_python("import standin_attn; print(standin_attn._C.set_device(3))").stdout.strip() == "3"


def test_site_packages_mode_and_no_import(tmp_path, wheelhouse, cli_env):
    venv = Venv.create(tmp_path / "venv")
    venv.install(wheelhouse.path, "torch==2.11.0", "standin_attn==1.0.0+torch2.9")
    proc, data = verify_cli(cli_env, tmp_path / "cache", "--site-packages", str(venv.site_packages), "--json")
    assert proc.returncode == 1
    assert data["python"] == str(venv.python)  # found from the venv layout, so the import still ran
    assert data["modules"][0]["import"]["checked"] is True

    proc, data = verify_cli(cli_env, tmp_path / "cache", "--python", str(venv.path), "--json", "--no-import")
    assert proc.returncode == 1  # the symbols alone condemn it
    assert data["modules"][0]["import"]["checked"] is False
    assert data["modules"][0]["verdict"] == "missing-symbols"


def test_a_rerun_comes_from_the_cache(tmp_path, wheelhouse):
    venv = Venv.create(tmp_path / "venv")
    venv.install(wheelhouse.path, "torch==2.9.0", "standin_attn==1.0.0+torch2.9")
    cache = tmp_path / "cache"
    first = verify_python(str(venv.python), cache=AbiCache(cache))
    assert first.ok and not first.modules[0].import_cached
    second = verify_python(str(venv.python), cache=AbiCache(cache))  # no import subprocess, no ELF read (the flags)
    assert second.ok and second.hashed_bytes == 0
    assert second.modules[0].static_cached and second.modules[0].import_cached
    assert second.to_json()["summary"]["cached"] == 1

    venv.install(wheelhouse.path, "torch==2.11.0")  # new libc10.so: nothing cached may answer for it
    third = verify_python(str(venv.python), cache=AbiCache(cache))
    assert not third.ok and not third.modules[0].static_cached and not third.modules[0].import_cached


@pytest.mark.parametrize("case", ["missing python", "venv without torch", "not a directory", "both"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, cli_env, case):
    empty = Venv.create(tmp_path / "empty")
    args = {
        "missing python": ["--python", str(tmp_path / "nope" / "bin" / "python")],
        "venv without torch": ["--python", str(empty.python)],
        "not a directory": ["--site-packages", str(tmp_path / "nope")],
        "both": ["--python", str(empty.python), "--site-packages", str(empty.site_packages)],
    }[case]
    proc, _ = verify_cli(cli_env, tmp_path / "cache", *args, "--json")
    assert proc.returncode == 2
    line = the_error(proc.stderr)
    expected = {"missing python": "nope/bin/python: no such file", "venv without torch": "torch is not installed",
                "not a directory": "not a directory", "both": "pass one of them"}[case]
    assert expected in line
    # docs/cli.md: with --json the same failure is also one JSON object on stdout, and nothing else is there
    assert json.loads(proc.stdout) == {"error": line.removeprefix("labwright: error: "), "exit_code": 2}


CRASHING = """
#include <Python.h>
#include <csignal>
#include <unistd.h>
#include <c10/standin.h>
PyMODINIT_FUNC PyInit_{name}(void) {{
  if (c10::detail::legacy_api(0) == 1) {{ {action} }}
  static PyModuleDef module = {{PyModuleDef_HEAD_INIT, "{name}", nullptr, -1, nullptr}};
  return PyModule_Create(&module);
}}
"""


def test_a_crashing_or_hanging_import_is_reported_and_the_rest_still_checked(tmp_path, wheelhouse):
    venv = Venv.create(tmp_path / "venv")
    venv.install(wheelhouse.path, "torch==2.9.0", "standin_attn==1.0.0+torch2.9")
    for name, action in [("segv", "raise(SIGSEGV);"), ("hang", "sleep(600);"), ("fine", "")]:
        compile_shared(venv.site_packages / f"{name}{ext_suffix()}", CRASHING.format(name=name, action=action),
                       include_dirs=[wheelhouse.v1.include_dir, Path(sysconfig.get_paths()["include"])],
                       library_dirs=[wheelhouse.v1.lib_dir], libraries=["c10"], rpath="$ORIGIN/torch/lib")
    report = verify_python(str(venv.python), cache=AbiCache(tmp_path / "cache"), timeout=10)
    verdicts = {m.module: (m.verdict, m.import_error) for m in report.modules}
    assert verdicts["fine"] == ("ok", None) and verdicts["standin_attn._C"] == ("ok", None)
    assert verdicts["segv"][0] == "import-crashed" and "killed by signal 11" in verdicts["segv"][1]
    assert verdicts["hang"][0] == "import-crashed" and "no answer within 10 s" in verdicts["hang"][1]
    assert not report.ok


def test_a_torch_that_does_not_import_fails_the_run(tmp_path, wheelhouse, cli_env):
    venv = Venv.create(tmp_path / "venv")
    venv.install(wheelhouse.path, "torch==2.9.0", "standin_attn==1.0.0+torch2.9")
    init = venv.site_packages / "torch" / "__init__.py"
    init.write_text(init.read_text() + "\nraise RuntimeError('this torch is broken')\n")
    proc, data = verify_cli(cli_env, tmp_path / "cache", "--python", str(venv.python), "--json")
    assert proc.returncode == 1
    assert "torch 2.9.0 itself does not import" in the_error(proc.stderr)
    assert data["torch"]["import"]["ok"] is False
    assert "RuntimeError: this torch is broken" in data["torch"]["import"]["error"]
    assert data["modules"][0]["import"]["checked"] is False  # nothing could be tried without torch


LATE_INIT = """\
import ctypes, os
import torch
# As cuda.core does with torch._C: make torch's library global, then load the module that links none of it.
ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"), mode=ctypes.RTLD_GLOBAL)
from late_attn import _C
"""


def test_a_late_bound_module_is_imported_as_its_package_loads_it(tmp_path, wheelhouse, cli_env):
    # cuda.core 1.2.0's _tensor_bridge on the real torch 2.11.0+cu130 (the lent H100): it links no torch library
    # and binds aoti_torch_* only after cuda.core loads torch._C RTLD_GLOBAL. The verifier called that broken;
    # this is the same shape with the stand-in torch, imported for real.
    unlinked = compile_shared(tmp_path / "build" / f"_C{ext_suffix()}", STANDIN_EXTENSION,
                              include_dirs=[wheelhouse.v1.include_dir, Path(sysconfig.get_paths()["include"])])
    write_wheel(tmp_path / "wheels", "late_attn", "1.0.0", {"late_attn/__init__.py": LATE_INIT.encode(),
                                                          f"late_attn/_C{ext_suffix()}": unlinked})
    venv = Venv.create(tmp_path / "venv")
    venv.install(wheelhouse.path, "torch==2.9.0", "standin_attn==1.0.0+torch2.9")
    venv.install(tmp_path / "wheels", "late_attn==1.0.0", no_deps=True)
    works = venv.run_python("import late_attn; print(late_attn._C.set_device(5))")
    assert works.returncode == 0 and works.stdout.strip() == "5", works.stderr
    plain = venv.run_python("import torch, importlib.util as u; s = u.spec_from_file_location('late_attn._C', "
                            f"'{venv.site_packages}/late_attn/_C{ext_suffix()}'); s.loader.exec_module("
                            "u.module_from_spec(s))")
    assert plain.returncode != 0 and "undefined symbol" in plain.stderr, plain.stderr

    proc, data = verify_cli(cli_env, tmp_path / "cache", "--python", str(venv.python), "--json")
    assert proc.returncode == 0, proc.stderr
    modules = {m["module"]: m for m in data["modules"]}
    late = modules["late_attn._C"]
    assert late["verdict"] == "ok" and late["late_bound"] == ["libc10.so"], late
    assert late["import"]["checked"] is True and late["import"]["ok"] is True, late["import"]
    assert any("RTLD_GLOBAL" in w for w in late["warnings"])
    # Imported before the promotion: the normally linked module was checked as it really loads.
    assert modules["standin_attn._C"]["verdict"] == "ok" and modules["standin_attn._C"]["late_bound"] == []
    table, _ = verify_cli(cli_env, tmp_path / "cache", "--python", str(venv.python))
    assert table.returncode == 0 and "late_attn._C: warning: links no torch library" in table.stdout, table.stdout


# -- the real torch 2.13.0 CPU wheel -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_torch() -> Venv:
    return torch_venv("2.13.0")


@pytest.fixture(scope="module")
def real_extension(real_torch: Venv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("real-ext")
    return build_torch_extension_wheel(real_torch, root / "wheels", root / "build")


def test_real_torch_extension_passes(tmp_path, real_torch, real_extension, cli_env):
    venv = overlay_venv(tmp_path / "venv", real_torch)
    venv.install(real_extension.parent, "torch_abi_probe", no_deps=True)
    works = venv.run_python("import torch_abi_probe as m; print(m._C.qr_rows(4), m._C.allocator_ok())")
    assert works.stdout.strip() == "4 True", works.stderr

    proc, data = verify_cli(cli_env, tmp_path / "cache", "--python", str(venv.python), "--json")
    assert proc.returncode == 0, proc.stderr
    assert data["torch"]["version"] == "2.13.0+cpu" and data["torch"]["cxx11_abi"] is True
    [module] = data["modules"]
    assert module["module"] == "torch_abi_probe._C" and module["verdict"] == "ok"
    assert module["built_for_torch"] == "2.13.0" and module["cxx11_abi"] is True
    assert module["torch_symbols"] > 10 and module["import"]["ok"] is True


def test_real_torch_extension_against_another_torch_fails(tmp_path, wheelhouse, real_extension, cli_env):
    # The extension built against real torch 2.13, installed beside the stand-in torch: its at::/c10:: symbols
    # are nowhere, and the import fails for real.
    venv = Venv.create(tmp_path / "venv")
    venv.install(wheelhouse.path, "torch==2.9.0")
    venv.install(real_extension.parent, "torch_abi_probe", no_deps=True)
    proc, data = verify_cli(cli_env, tmp_path / "cache", "--python", str(venv.python), "--json")
    assert proc.returncode == 1
    [module] = data["modules"]
    assert module["verdict"] == "missing-symbols"
    names = {m["demangled"] for m in module["missing"]["symbols"]}
    assert "at::_ops::qr::call(at::Tensor const&, bool)" in names and "c10::GetCPUAllocator()" in names
    assert module["missing"]["count"] == module["torch_symbols"]
    assert module["import"]["ok"] is False and "ImportError" in module["import"]["error"]


def test_real_torch_2_13_extension_against_torch_2_14(tmp_path, real_extension, cli_env):
    # torch 2.14 removed at::qr: a real cross-version break. Its wheel is a CUDA build, so only torch itself is
    # installed (no nvidia-* wheels): enough to read its libraries, not to import it, hence --no-import.
    try:
        newer = torch_venv("2.14.1", no_deps=True)
    except RuntimeError as exc:
        if "No matching distribution" in str(exc):
            pytest.skip("torch 2.14.1 is not available to pip on this machine")
        raise
    venv = overlay_venv(tmp_path / "venv", newer)
    venv.install(real_extension.parent, "torch_abi_probe", no_deps=True)
    proc, data = verify_cli(cli_env, tmp_path / "cache", "--python", str(venv.python), "--json", "--no-import")
    assert proc.returncode == 1
    [module] = data["modules"]
    assert [m["demangled"] for m in module["missing"]["symbols"]] == ["at::_ops::qr::call(at::Tensor const&, bool)"]
    assert any("installed torch 2.14.1" in w for w in module["warnings"])
