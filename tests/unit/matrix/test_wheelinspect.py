"""`matrix inspect`: what a wheel was built against, from its label, METADATA and the .so files it ships.

The wheels are real: g++-compiled shared objects linking a library whose soname is libcudart.so.N (what a CUDA
extension's DT_NEEDED says) and/or libc10.so with a torch-namespaced symbol, zipped with their dist-info."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.matrix.wheelinspect import inspect_wheel
from support.cli_child import run_cli
from support.wheels import compile_shared, write_wheel

TORCH_CALL = """
namespace c10 { void warn_about(int); }
extern "C" int PyInit__C(void) { c10::warn_about(1); return 0; }
"""


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    root = tmp_path_factory.mktemp("libs")
    for major in (12, 13):
        compile_shared(root / f"cuda{major}" / f"libcudart.so.{major}", "extern \"C\" int cudaFree(void*){return 0;}",
                       soname=f"libcudart.so.{major}")
    compile_shared(root / "torch" / "libc10.so", "namespace c10 { void warn_about(int) {} }", soname="libc10.so")
    return root


def _extension(libs: Path, out: Path, cuda: int | None, torch: bool = True) -> Path:
    dirs, names, extra = [], [], []
    if cuda:
        dirs.append(libs / f"cuda{cuda}")
        extra.append(f"-l:libcudart.so.{cuda}")
    if torch:
        dirs.append(libs / "torch")
        names.append("c10")
    return compile_shared(out, TORCH_CALL if torch else 'extern "C" int PyInit__C(void){return 0;}',
                          library_dirs=dirs, libraries=names, extra=["-Wl,--no-as-needed", *extra])


def _wheel(tmp_path, libs, version, cuda, requires, torch=True, metadata_version=None):
    so = _extension(libs, tmp_path / "build" / f"{version}.so", cuda, torch)
    wheel = write_wheel(tmp_path / "wh", "exllamav3", version, {"exllamav3_ext/_C.so": so}, requires=requires,
                        tag="cp312-cp312-linux_x86_64")
    if metadata_version:  # rewrite METADATA's Version only: a wheel whose metadata contradicts its name
        import zipfile

        with zipfile.ZipFile(wheel) as src:
            items = {n: src.read(n) for n in src.namelist()}
        meta = next(n for n in items if n.endswith("METADATA"))
        items[meta] = items[meta].replace(f"Version: {version}".encode(), f"Version: {metadata_version}".encode())
        with zipfile.ZipFile(wheel, "w") as dst:
            for n, data in items.items():
                dst.writestr(n, data)
    return wheel


def test_label_metadata_and_linked_cuda_agree(tmp_path, libs):
    wheel = _wheel(tmp_path, libs, "1.4.2+cu132.torch2.11.0", 13, ["torch==2.11.0", "numpy"])
    result = inspect_wheel(wheel)
    assert (result.torch, result.torch_build, result.cuda, result.links_torch) == ("2.11", "2.11.0", "13.2", True)
    assert result.contradictions == []
    assert ".so links libcudart.so.13" in result.evidence and "Requires-Dist: torch==2.11.0" in result.evidence


def test_a_wheel_without_a_label_is_classified_from_its_metadata_and_so(tmp_path, libs):
    wheel = _wheel(tmp_path, libs, "1.6.5", 12, ["torch==2.15.0"])
    result = inspect_wheel(wheel)
    assert (result.torch, result.torch_build, result.cuda) == ("2.15", "2.15.0", "12")
    assert result.contradictions == []


@pytest.mark.parametrize(("version", "cuda", "requires", "torch", "meta", "contradiction"), [
    ("1.4.2+cu128.torch2.11.0", 13, ["torch==2.11.0"], True, None,
     "the label says CUDA 12.8, its .so files link libcudart.so.13"),
    ("1.4.2+cu132.torch2.10.0", 13, ["torch==2.11.0"], True, None,
     "the label says torch 2.10, Requires-Dist pins torch==2.11.0"),
    ("1.4.2+cu132.torch2.11.0", 13, ["torch==2.11.0"], True, "1.4.3",
     "METADATA says version 1.4.3, the file name 1.4.2+cu132.torch2.11.0"),
    ("1.4.2+cu132.torch2.11.0", 13, [], False, None,
     "the label says torch 2.11, but none of its .so files links torch"),
])
def test_contradictions_are_one_line_each(tmp_path, libs, version, cuda, requires, torch, meta, contradiction):
    result = inspect_wheel(_wheel(tmp_path, libs, version, cuda, requires, torch, meta))
    assert result.contradictions == [contradiction]


def test_cli_exit_codes(tmp_path, libs, cli_env):
    good = _wheel(tmp_path, libs, "1.4.2+cu132.torch2.11.0", 13, ["torch==2.11.0"])
    proc = run_cli(["matrix", "inspect", str(good), "--json"], env=cli_env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["cuda"] == "13.2"
    bad = _wheel(tmp_path / "b", libs, "1.4.2+cu128.torch2.11.0", 13, ["torch==2.11.0"])
    proc = run_cli(["matrix", "inspect", str(bad)], env=cli_env)
    assert proc.returncode == 1
    assert "✗ the label says CUDA 12.8, its .so files link libcudart.so.13" in proc.stdout
    assert proc.stderr.count("\n") == 1
    truncated = tmp_path / "exllamav3-1.0.0-cp312-cp312-linux_x86_64.whl"
    truncated.write_bytes(good.read_bytes()[:200])
    proc = run_cli(["matrix", "inspect", str(truncated)], env=cli_env)
    assert proc.returncode == 2 and "not a zip archive" in proc.stderr and "Traceback" not in proc.stderr


def test_not_a_wheel_name_is_bad_input(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("x")
    with pytest.raises(BadInput, match="notes.txt"):
        inspect_wheel(path)
