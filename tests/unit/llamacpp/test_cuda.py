"""The CUDA build's pure parts: GPU facts -> CMAKE_CUDA_ARCHITECTURES as llama.cpp writes them, refusals for a GPU
the toolkit cannot compile for, the cache key, the pip toolkit's layout, and the build command's bad input."""

from __future__ import annotations

import hashlib
import json
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from labwright.errors import BadInput, OperationFailed
from labwright.llamacpp import build, cuda
from labwright.llamacpp.cuda import CudaToolchain

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("capability", "expected"), [
    ("8.6", "86-real"), ("sm_86", "86-real"), ("7.5", "75-real"), ("8.9", "89-real"), ("9.0", "90-real"),
    ("12.0", "120a-real"), ("sm_120", "120a-real"), ("12.1", "121a-real"), ("10.0", "100-real"),
])
def test_a_compute_capability_becomes_llama_cpps_architecture_entry(capability: str, expected: str) -> None:
    assert cuda.cmake_architecture(capability) == expected


def test_architectures_are_distinct_and_sorted_by_capability() -> None:
    assert cuda.architectures(["12.0", "8.6", "8.6", "8.9"], cuda.DEFAULT) == ["86-real", "89-real", "120a-real"]


def test_volta_is_refused_for_cuda_13_naming_the_toolkit_to_use() -> None:
    with pytest.raises(BadInput) as caught:
        cuda.architectures(["8.6", "7.0"], cuda.DEFAULT)
    message = str(caught.value)
    assert message.startswith("--arch 7.0: a llama.cpp CUDA 13.0 build cannot target it: CUDA 13.0 dropped Volta")
    assert "CUDA >= 9.0 and <= 12.9 toolkit (--cuda-root DIR)" in message
    assert "\n" not in message


def test_blackwell_is_refused_for_a_toolkit_older_than_12_8() -> None:
    older = CudaToolchain(version="12.6", root=Path("/usr/local/cuda-12.6"))
    with pytest.raises(BadInput, match=r"--arch 12.0: a llama.cpp CUDA 12.6 build cannot target it: .*needs CUDA >= "
                                       r"12.8"):
        cuda.architectures(["12.0"], older)
    assert cuda.architectures(["8.6"], older) == ["86-real"]


def test_no_architecture_is_refused() -> None:
    with pytest.raises(BadInput, match="--arch: no GPU architecture given"):
        cuda.architectures([], cuda.DEFAULT)


def test_the_cache_key_holds_llama_cpp_cuda_and_architectures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path))
    archs = cuda.architectures(["12.0", "8.6"], cuda.DEFAULT)
    assert cuda.build_key(cuda.DEFAULT, archs) == "cuda13.0-sm86-sm120a"
    assert build.cuda_cache_dir(cuda.DEFAULT, archs, "0.3.36") == tmp_path / "llama" / "0.3.36" / "cuda13.0-sm86-sm120a"
    assert build.cuda_cache_dir(cuda.DEFAULT, ["89-real"], "0.3.36").name == "cuda13.0-sm89"


def test_cuda_flags_name_the_toolkit_the_architectures_and_a_relative_runpath() -> None:
    flags = build.cuda_flags(Path("/c/pip-13.0"), ["86-real", "120a-real"])
    assert "-DGGML_CUDA=ON" in flags
    assert "-DCUDAToolkit_ROOT=/c/pip-13.0" in flags
    assert "-DCMAKE_CUDA_COMPILER=/c/pip-13.0/bin/nvcc" in flags
    assert "-DCMAKE_CUDA_ARCHITECTURES=86-real;120a-real" in flags
    assert "-DGGML_CUDA_NO_VMM=ON" in flags
    assert "-DCMAKE_BUILD_RPATH=$ORIGIN/../lib/llama-server" in flags


def test_a_pip_version_without_pinned_wheels_is_refused() -> None:
    with pytest.raises(BadInput, match=r"--cuda 12.8: labwright pins NVIDIA's pip toolkit for CUDA 13.0 only"):
        cuda.toolchain("12.8")
    assert cuda.toolchain("13.0") is cuda.DEFAULT
    assert cuda.toolchain("cu130") is cuda.DEFAULT


def test_a_root_without_nvcc_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"--cuda-root .*: no bin/nvcc there"):
        cuda.toolchain(root=tmp_path)


def test_an_installed_toolkit_reports_its_nvcc_version(tmp_path: Path) -> None:
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.9, V12.9.86'\n")
    nvcc.chmod(0o755)
    found = cuda.toolchain(root=tmp_path)
    assert (found.version, found.root, found.toolkit_dir()) == ("12.9", tmp_path, tmp_path)


def test_a_wheel_unpacks_into_one_cuda_root_with_its_modes_and_the_cmake_names(tmp_path: Path) -> None:
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        executable = zipfile.ZipInfo("nvidia/cu13/bin/nvcc")
        executable.external_attr = (stat.S_IFREG | 0o755) << 16
        archive.writestr(executable, "#!/bin/sh\n")
        archive.writestr("nvidia/cu13/lib/libcudart.so.13", b"\x7fELF")
        archive.writestr("nvidia/cu13/lib/libcublas.so.13", b"\x7fELF")
        archive.writestr("nvidia/__init__.py", "")
        archive.writestr("nvidia_cuda_nvcc-13.0.88.dist-info/RECORD", "")
    root = tmp_path / "root"
    cuda._unpack(wheel, root)
    cuda._link_layout(root)
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == [
        "bin", "bin/nvcc", "lib", "lib/libcublas.so", "lib/libcublas.so.13", "lib/libcudart.so",
        "lib/libcudart.so.13", "lib64"]
    assert (root / "bin" / "nvcc").stat().st_mode & 0o777 == 0o755
    assert (root / "lib" / "libcudart.so").resolve() == root / "lib" / "libcudart.so.13"
    assert (root / "lib64" / "libcublas.so.13").read_bytes() == b"\x7fELF"


def test_the_pins_cover_a_whole_compiler() -> None:
    projects = {wheel.project for wheel in cuda.DEFAULT.wheels}
    assert projects == {"nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-runtime",
                        "nvidia-cuda-cccl", "nvidia-cublas", "nvidia-cuda-cuobjdump"}
    assert all(len(wheel.sha256) == 64 and wheel.filename.endswith(".whl") for wheel in cuda.DEFAULT.wheels)


def test_a_cached_cuda_build_is_reused_without_toolkit_download_or_compiler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path))
    cache = build.cuda_cache_dir(cuda.DEFAULT, ["86-real"])
    (cache / "bin").mkdir(parents=True)
    (cache / "bin" / "llama-server").write_bytes(b"\x7fELF")
    # its manifest as the build writes it (a manifest of another shape is no build: build.manifest_problem)
    (cache / "manifest.json").write_text(json.dumps({"files": {"bin/llama-server": hashlib.sha256(b"\x7fELF")
                                                                .hexdigest()}}))

    def no(*args: object, **kwargs: object) -> None:
        raise AssertionError("must not download or build when the CUDA build is cached")

    monkeypatch.setattr(build, "ensure_build_tools", no)
    monkeypatch.setattr(cuda, "ensure_toolkit", no)
    monkeypatch.setattr(build, "download_sdist", no)
    assert build.build_llama_server(cuda=cuda.DEFAULT, archs=["8.6"]) == cache / "bin" / "llama-server"


@pytest.mark.parametrize(("args", "message"), [
    (["--arch", "6.1"], "labwright: error: --arch 6.1: a llama.cpp CUDA 13.0 build cannot target it: CUDA 13.0 "
                        "dropped Pascal"),
    (["--arch", "9.9"], "labwright: error: compute capability 9.9: not in labwright/data/gpu-arch.toml"),
    (["--arch", "eight"], "labwright: error: compute capability 'eight': not MAJOR.MINOR"),
    (["--cuda", "12.8", "--arch", "8.6"], "labwright: error: --cuda 12.8: labwright pins NVIDIA's pip toolkit"),
    (["--cuda", "13.0"], "labwright: error: --arch: a CUDA build needs the GPUs' compute capabilities"),
    (["--jobs", "0"], "labwright: error: --jobs 0: give 1 to 4096 parallel compile jobs"),
])
def test_the_build_command_refuses_bad_input_in_one_line_writing_nothing(
        args: list[str], message: str, tmp_path: Path) -> None:
    env = {"LABWRIGHT_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-m", "labwright", "build", "llamacpp", *args], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(message), result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "cache").exists()
    # the old spelling, `python -m labwright.llamacpp.build`: the same, after one deprecation line
    result = subprocess.run([sys.executable, "-m", "labwright.llamacpp.build", *args], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == "" and not (tmp_path / "cache").exists()
    assert result.stderr.splitlines() == [
        "labwright: deprecated: python -m labwright.llamacpp.build is labwright build llamacpp now; the old spelling "
        "goes in the next release", result.stderr.splitlines()[1]]
    assert result.stderr.splitlines()[1].startswith(message)


def test_an_installed_cuda_12_ships_its_own_major_s_libraries(tmp_path: Path) -> None:
    older = CudaToolchain(version="12.9", root=tmp_path)
    assert cuda.runtime_libraries(older) == ("libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12")
    assert cuda.runtime_libraries(cuda.DEFAULT) == cuda.RUNTIME_LIBRARIES
    (tmp_path / "targets/x86_64-linux/lib").mkdir(parents=True)
    (tmp_path / "targets/x86_64-linux/lib/libcudart.so.12").write_bytes(b"\x7fELF")
    assert cuda.library_path(tmp_path, "libcudart.so.12") == tmp_path / "targets/x86_64-linux/lib/libcudart.so.12"
    with pytest.raises(OperationFailed, match=r"libcublas.so.12 is not in .*: not a complete toolkit"):
        cuda.library_path(tmp_path, "libcublas.so.12")



@pytest.mark.parametrize(("marker", "nvcc_says", "kept"), [
    (b"13.0\n", "release 13.0, V13.0.88", True),
    (b"", "release 13.0, V13.0.88", False),           # emptied
    (b"12.9\n", "release 13.0, V13.0.88", False),     # another version's
    (b"13.0\n", "release 12.9, V12.9.86", False),     # an nvcc written over
    (b"13.0\n", None, False),                         # nvcc gone
    (b"13.0" + b"\0" * 100, "release 13.0, V13.0.88", False),
])
def test_the_unpacked_toolkit_is_reused_only_when_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        marker: bytes, nvcc_says: str | None, kept: bool) -> None:
    """A `.complete` marker that exists is not enough: it must name the version, and nvcc must run and say it (a
    real script answering as nvcc does). The whole one is what ensure_toolkit returns without downloading."""
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path / "cache"))
    toolchain = cuda.TOOLCHAINS["13.0"]
    root = toolchain.toolkit_dir()
    (root / "bin").mkdir(parents=True)
    (root / ".complete").write_bytes(marker)
    if nvcc_says is not None:
        (root / "bin" / "nvcc").write_text(f"#!/bin/sh\necho 'Cuda compilation tools, {nvcc_says}'\n")
        (root / "bin" / "nvcc").chmod(0o755)
    assert cuda.toolkit_ok(root / ".complete", "13.0") is kept
    if kept:
        assert cuda.ensure_toolkit(toolchain) == root

def test_something_that_is_no_file_in_the_markers_place_is_one_line(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path / "cache"))
    root = cuda.TOOLCHAINS["13.0"].toolkit_dir()
    (root / ".complete").mkdir(parents=True)
    with pytest.raises(BadInput, match=r"\.complete"):
        cuda.ensure_toolkit(cuda.TOOLCHAINS["13.0"])
