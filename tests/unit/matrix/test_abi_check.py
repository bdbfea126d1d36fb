"""The ABI verifier's static check, its cache and its metadata reading, on .so files compiled here (no venv, no pip).

A site-packages directory is laid out by hand: torch/lib/libc10.so from the stand-in API 1 or 2, and an
extension compiled against API 1. No Python is found for it, so only the symbols are checked.
"""

from __future__ import annotations

import shutil
import sys
import sysconfig
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.matrix import abi_env
from labwright.matrix.abi import verify, verify_python
from labwright.matrix.abi_cache import AbiCache
from labwright.matrix.abi_env import Distribution
from support.cli_child import run_cli
from support.wheels import (
    STANDIN_EXTENSION,
    build_standin_torch,
    compile_shared,
    ext_suffix,
)

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the .so files it reads")


@pytest.fixture(scope="module")
def standins(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("standins")
    v1 = build_standin_torch(root / "wheels", root / "build", "2.9.0", api=1)
    v2 = build_standin_torch(root / "wheels", root / "build", "2.11.0", api=2)
    extension = compile_shared(root / "ext" / f"_C{ext_suffix()}", STANDIN_EXTENSION,
                               include_dirs=[v1.include_dir, Path(sysconfig.get_paths()["include"])],
                               library_dirs=[v1.lib_dir], libraries=["c10"], rpath="$ORIGIN/../torch/lib")
    return v1, v2, extension


def lay_out(site: Path, torch_tree: Path, extension: Path) -> Path:
    """site/torch (copied from a stand-in tree) + site/standin_attn/_C*.so."""
    shutil.copytree(torch_tree / "torch", site / "torch", dirs_exist_ok=True)
    (site / "standin_attn").mkdir(parents=True, exist_ok=True)
    shutil.copy2(extension, site / "standin_attn" / extension.name)
    return site


def test_matching_torch_passes(tmp_path, standins):
    v1, _, extension = standins
    site = lay_out(tmp_path / "site-packages", v1.tree, extension)
    report = verify_python(site_packages=site, cache=AbiCache(tmp_path / "cache"))
    assert report.ok, report.to_json()
    [module] = report.modules
    assert module.module == "standin_attn._C" and module.kind == "extension"
    assert module.verdict == "ok" and module.torch_symbols == 4
    assert not module.import_checked  # no interpreter for a bare directory: said, not hidden
    assert any("not imported" in w for w in module.warnings)


def test_upgraded_torch_names_the_missing_symbols(tmp_path, standins):
    _, v2, extension = standins
    site = lay_out(tmp_path / "site-packages", v2.tree, extension)
    report = verify_python(site_packages=site, cache=AbiCache(tmp_path / "cache"))
    assert not report.ok
    [module] = report.modules
    assert module.verdict == "missing-symbols"
    missing = {m.demangled: m for m in module.missing}
    assert set(missing) == {"c10::cuda::SetDevice(int)", "c10::detail::legacy_api(int)"}
    assert missing["c10::cuda::SetDevice(int)"].torch_has_instead == ["c10::cuda::SetDevice(signed char)"]
    assert missing["c10::detail::legacy_api(int)"].torch_has_instead == []
    data = report.to_json()
    assert data["ok"] is False and data["summary"] == {"checked": 1, "ok": 0, "broken": 1, "cached": 0}
    assert data["modules"][0]["missing"]["count"] == 2


def test_second_run_is_served_from_the_cache(tmp_path, standins):
    _, v2, extension = standins
    site = lay_out(tmp_path / "site-packages", v2.tree, extension)
    env = abi_env.environment_for_site_packages(site)
    first = verify(env, cache=AbiCache(tmp_path / "cache"))
    assert first.hashed_bytes > 0
    second = verify(env, cache=AbiCache(tmp_path / "cache"))
    assert second.hashed_bytes == 0  # every hash came from the stat memo: no file was read
    assert all(m.static_cached for m in second.modules)
    assert second.to_json()["modules"] == [
        {**m, "static_cached": True} for m in first.to_json()["modules"]]


def test_replacing_torch_invalidates_the_cache(tmp_path, standins):
    v1, v2, extension = standins
    site = lay_out(tmp_path / "site-packages", v2.tree, extension)
    cache_dir = tmp_path / "cache"
    assert not verify_python(site_packages=site, cache=AbiCache(cache_dir)).ok
    # Replace libc10.so the way pip does (a new file), with the API the extension was built for.
    target = site / "torch" / "lib" / "libc10.so"
    target.unlink()
    shutil.copy2(v1.lib_dir / "libc10.so", target)
    report = verify_python(site_packages=site, cache=AbiCache(cache_dir))
    assert report.ok and not report.modules[0].static_cached


def test_disabled_cache_writes_nothing(tmp_path, standins):
    v1, _, extension = standins
    site = lay_out(tmp_path / "site-packages", v1.tree, extension)
    verify_python(site_packages=site, cache=AbiCache(tmp_path / "cache", enabled=False))
    assert not (tmp_path / "cache").exists()


def test_extension_linking_no_torch_library_is_late_bound_not_broken(tmp_path, standins):
    v1, v2, _ = standins
    # Compiled against libc10 but linked without it: its symbols bind only once its package loads torch's library
    # RTLD_GLOBAL, as cuda.core's _tensor_bridge does with torch._C (seen on a real CUDA torch). Against the torch
    # it was built for, that is no ABI break: ok, with a warning naming the library it depends on being global.
    unlinked = compile_shared(tmp_path / "build" / f"_C{ext_suffix()}", STANDIN_EXTENSION,
                              include_dirs=[v1.include_dir, Path(sysconfig.get_paths()["include"])])
    site = lay_out(tmp_path / "site-packages", v1.tree, unlinked)
    report = verify_python(site_packages=site, cache=AbiCache(tmp_path / "cache"))
    [module] = report.modules
    assert report.ok and module.verdict == "ok" and module.missing == []
    assert module.late_bound == ["libc10.so"]
    assert any("links no torch library" in w and "libc10.so is loaded RTLD_GLOBAL" in w for w in module.warnings)
    # The same file against the next torch, where one of its symbols exists nowhere: the ABI break is reported,
    # every unresolved symbol with it (also those an unlinked torch library exports).
    site2 = lay_out(tmp_path / "site-packages-2", v2.tree, unlinked)
    [broken] = verify_python(site_packages=site2, cache=AbiCache(tmp_path / "cache")).modules
    assert broken.verdict == "missing-symbols" and broken.late_bound == []
    missing = {m.demangled: m for m in broken.missing}
    assert missing["c10::detail::legacy_api(int)"].exported_by_unlinked == []
    assert missing["c10::version_string[abi:cxx11]()"].exported_by_unlinked == ["libc10.so"]


def test_files_without_torch_are_not_reported(tmp_path, standins):
    v1, _, extension = standins
    site = lay_out(tmp_path / "site-packages", v1.tree, extension)
    compile_shared(site / "plain" / f"_speedups{ext_suffix()}", "extern \"C\" int PyInit__speedups() { return 0; }")
    report = verify_python(site_packages=site, cache=AbiCache(tmp_path / "cache"))
    assert [m.module for m in report.modules] == ["standin_attn._C"]


def test_bad_inputs(tmp_path):
    with pytest.raises(BadInput, match="not a directory"):
        verify_python(site_packages=tmp_path / "nope")
    with pytest.raises(BadInput, match="no torch installed here"):
        verify_python(site_packages=tmp_path)
    with pytest.raises(BadInput, match="both given"):
        verify_python(python=sys.executable, site_packages=tmp_path)
    with pytest.raises(BadInput, match="no environment given"):
        verify_python()
    with pytest.raises(BadInput, match="no such file"):
        verify_python(python=str(tmp_path / "bin" / "python"))
    with pytest.raises(BadInput, match="not a virtualenv"):
        verify_python(python=str(tmp_path))
    script = tmp_path / "not-python"
    script.write_text("#!/bin/sh\necho hello\n")
    script.chmod(0o755)
    with pytest.raises(BadInput, match="not a working Python interpreter"):
        verify_python(python=str(script))


# -- metadata ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version, requires, expected", [
    ("2.8.3+cu130torch2.11", [], ("2.11", "version label +cu130torch2.11")),
    ("2.8.3+cu12torch2.8cxx11abiFALSE", [], ("2.8", "version label +cu12torch2.8cxx11abiFALSE")),
    ("1.4.2+cu128.torch2.9.0", ["torch==2.9.0"], ("2.9.0", "version label +cu128.torch2.9.0")),
    ("0.0.37", ["torch==2.9.0+cu128", "numpy"], ("2.9.0", "Requires-Dist torch==2.9.0+cu128")),
    ("1.0", ["torch>=2.0"], (None, None)),  # a range says nothing about the build
    ("1.0", ['torch==2.9.0; extra == "cuda"'], (None, None)),
    ("1.6.2", [], (None, None)),
])
def test_built_for_torch(version, requires, expected):
    assert abi_env.built_for_torch(Distribution("x", version, requires)) == expected


def test_same_minor():
    assert abi_env.same_minor("2.11", "2.11.0+cu130")
    assert not abi_env.same_minor("2.9", "2.11.0")
    assert abi_env.same_minor("2.9.0", None)


def test_module_names(tmp_path):
    site = tmp_path / "site-packages"
    assert abi_env.module_name(site / "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so", site) == "flash_attn_2_cuda"
    assert abi_env.module_name(site / "exllamav3" / "exllamav3_ext.abi3.so", site) == "exllamav3.exllamav3_ext"


def test_python_for_site_packages(tmp_path):
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert abi_env.python_for_site_packages(site) is None  # no interpreter there yet
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text("")
    assert abi_env.python_for_site_packages(site) == str(venv / "bin" / "python")


def test_owners_and_metadata(tmp_path):
    site = tmp_path
    dist_info = site / "flash_attn-2.8.3+cu130torch2.11.dist-info"
    dist_info.mkdir()
    (dist_info / "RECORD").write_text(
        "flash_attn/__init__.py,sha256=x,1\nflash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so,sha256=y,2\n")
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: flash_attn\nVersion: 2.8.3+cu130torch2.11\nRequires-Dist: einops\n\n"
        "Version: not-a-header (long description)\n")
    owned = abi_env.owners([site])
    assert owned == {str(site / "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so"): dist_info}
    dist = abi_env.distribution(dist_info, {})
    assert (dist.name, dist.version, dist.requires) == ("flash_attn", "2.8.3+cu130torch2.11", ["einops"])


def test_a_different_cuda_runtime_is_a_warning(tmp_path, standins):
    v1, _, _ = standins
    stubs = tmp_path / "stubs"
    for major in (12, 13):
        compile_shared(stubs / str(major) / f"libcudart.so.{major}", f'extern "C" int cudart_{major}() {{ return 0; }}',
                       soname=f"libcudart.so.{major}")
    site = tmp_path / "site-packages"
    shutil.copytree(v1.tree / "torch", site / "torch")
    # torch's CUDA library links runtime 13; the extension links runtime 12 (a cu12 wheel beside a cu13 torch).
    compile_shared(site / "torch" / "lib" / "libc10_cuda.so",
                   'extern "C" int cudart_13(); int f() { return cudart_13(); }',
                   library_dirs=[stubs / "13"], extra=["-l:libcudart.so.13"])
    extension = compile_shared(
        tmp_path / "build" / f"_C{ext_suffix()}",
        STANDIN_EXTENSION + 'extern "C" int cudart_12(); int g() { return cudart_12(); }',
        include_dirs=[v1.include_dir, Path(sysconfig.get_paths()["include"])],
        library_dirs=[v1.lib_dir, stubs / "12"], libraries=["c10"], extra=["-l:libcudart.so.12"])
    lay_out(site, v1.tree, extension)
    [module] = verify_python(site_packages=site, cache=AbiCache(tmp_path / "cache")).modules
    assert module.cuda_runtime == 12 and module.verdict == "ok"
    assert "links CUDA runtime 12, torch links CUDA 13" in module.warnings


def test_files_that_do_not_need_torch_are_never_hashed(tmp_path, standins):
    v1, _, extension = standins
    site = lay_out(tmp_path / "site-packages", v1.tree, extension)
    # Stands for the GBs of nvidia-* libraries beside a CUDA torch: ELF, big, no torch in them.
    big = compile_shared(site / "nvidia" / "cublas" / "lib" / "libcublasLt.so.13",
                         "extern \"C\" int cublas() { return 0; }\nchar padding[8 << 20] = {1};")
    cache = AbiCache(tmp_path / "cache")
    torch_bytes = sum(p.stat().st_size for p in (site / "torch" / "lib").iterdir())
    first = verify_python(site_packages=site, cache=cache)
    assert first.hashed_bytes == torch_bytes + extension.stat().st_size  # torch + the extension, not the 8 MB
    assert big.stat().st_size > 8 << 20 and cache.known_unrelated(big)


def test_linker_scripts_are_not_reported_but_a_torn_so_is_broken(tmp_path, standins):
    v1, _, extension = standins
    site = lay_out(tmp_path / "site-packages", v1.tree, extension)
    (site / "libscript.so").write_text("/* GNU ld script */\nGROUP ( libc.so.6 )\n")  # linker scripts exist
    report = verify_python(site_packages=site, cache=AbiCache(tmp_path / "cache"))
    assert report.ok and [m.module for m in report.modules] == ["standin_attn._C"]
    (site / "torn.so").write_bytes(b"\x7fELF" + b"\x02\x01\x01" + b"\0" * 9)  # an ELF magic and nothing else
    report = verify_python(site_packages=site, cache=AbiCache(tmp_path / "cache"))
    assert not report.ok
    torn = next(m for m in report.modules if m.path == str(site / "torn.so"))
    assert torn.verdict == "broken-file" and torn.broken and torn.broken.startswith(f"{site / 'torn.so'}: ")


@pytest.mark.parametrize("cut", ["empty", "header", "quarter", "half", "section-table", "one-short", "not-elf"])
def test_a_half_installed_extension_is_reported_broken_naming_it(tmp_path, standins, cut):
    """`stack verify` on what a half-finished install leaves: the extension cut short (or empty, or not ELF) is
    reported broken with its path, the rest of the report still made; never a parser traceback."""
    v1, _, extension = standins
    site = lay_out(tmp_path / "site-packages", v1.tree, extension)
    target = site / "standin_attn" / extension.name
    whole = target.read_bytes()
    cuts = {"empty": 0, "header": 40, "quarter": len(whole) // 4, "half": len(whole) // 2,
            "section-table": len(whole) - 100, "one-short": len(whole) - 1}
    target.write_bytes(whole[:cuts[cut]] if cut in cuts else b"PK\x03\x04" + whole[4:])
    report = verify_python(site_packages=site, cache=AbiCache(tmp_path / "cache"))
    assert not report.ok
    [module] = report.modules
    assert module.verdict == "broken-file" and module.module == "standin_attn._C" and module.kind == "extension"
    assert module.broken is not None and module.broken.startswith(f"{target}: ") and module.warnings == [module.broken]
    assert report.to_json()["summary"] == {"checked": 1, "ok": 0, "broken": 1, "cached": 0}


def test_stack_verify_cli_names_the_torn_extension_and_exits_1(tmp_path, standins, cli_env):
    v1, _, extension = standins
    site = lay_out(tmp_path / "site-packages", v1.tree, extension)
    target = site / "standin_attn" / extension.name
    target.write_bytes(target.read_bytes()[:1000])
    proc = run_cli(["stack", "verify", "--site-packages", str(site), "--no-cache"], env=cli_env)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout and proc.stderr.count("\n") == 1
    assert "broken-file" in proc.stdout and str(target) in proc.stdout.replace("\n", "")
    assert "1 of 1 extension(s) broken" in proc.stderr


def test_torch_own_files_outside_the_torch_package_are_not_consumers(tmp_path, standins):
    v1, _, extension = standins
    site = lay_out(tmp_path / "site-packages", v1.tree, extension)
    # torch's wheel also ships functorch/_C*.so; it links torch but is torch, not a consumer of it.
    shutil.copytree(site / "standin_attn", site / "functorch")
    dist_info = site / "torch-2.9.0.dist-info"
    dist_info.mkdir()
    (dist_info / "RECORD").write_text(f"functorch/{extension.name},,\n")
    report = verify_python(site_packages=site, cache=AbiCache(tmp_path / "cache"))
    assert [m.module for m in report.modules] == ["standin_attn._C"]
