"""Which llama-server a host gets (labwright.llamacpp.deploy_data.build_choice / server_files): the CUDA build for
the GPU facts' compute capabilities, the CPU build without NVIDIA GPUs, a refusal in one line for what cannot work."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from pyinfra.api.exceptions import DeployError

from labwright.llamacpp import build, cuda
from labwright.llamacpp.deploy_data import BuildChoice, build_choice, guest_lib_dir, server_files, settings_from

RTX_3090 = {"index": 0, "name": "NVIDIA GeForce RTX 3090", "compute_cap": "8.6"}
RTX_5090 = {"index": 1, "name": "NVIDIA GeForce RTX 5090", "compute_cap": "12.0"}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A build cache like labwright.llamacpp.build leaves it: the CPU binary and one CUDA build (sm_86)."""
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path))
    version = build.cache_dir()
    version.mkdir(parents=True)
    (version / "llama-server").write_bytes(b"cpu build")
    (version / "llama-server.sha256").write_text(hashlib.sha256(b"cpu build").hexdigest() + "\n")  # as the build
    cuda_dir = build.cuda_cache_dir(cuda.DEFAULT, ["86-real"])
    files = {"bin/llama-server": b"cuda build", **{f"lib/llama-server/{n}": n.encode() for n in cuda.RUNTIME_LIBRARIES}}
    for rel, content in files.items():
        (cuda_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (cuda_dir / rel).write_bytes(content)
    (cuda_dir / "manifest.json").write_text(json.dumps(
        {"files": {rel: hashlib.sha256(content).hexdigest() for rel, content in files.items()}}))
    return version


def test_no_gpus_or_no_nvidia_smi_is_the_cpu_build() -> None:
    assert build_choice({}, None) == BuildChoice("cpu")
    assert build_choice({}, []) == BuildChoice("cpu")
    assert build_choice({}, [{"index": 0, "compute_cap": None}]) == BuildChoice("cpu")


def test_gpus_choose_the_cuda_build_for_their_architectures() -> None:
    choice = build_choice({}, [RTX_5090, RTX_3090, RTX_3090])
    assert choice == BuildChoice("cuda", ("86-real", "120a-real"), ("8.6", "12.0"))
    assert choice.describe() == "CUDA 13.0 build for sm_86 sm_120a"


def test_cpu_on_request_and_a_given_binary_win_over_the_gpus() -> None:
    assert build_choice({"llamacpp_build": "cpu"}, [RTX_3090]).kind == "cpu"
    assert build_choice({"llamacpp_binary_src": "/tmp/mine"}, [RTX_3090]).kind == "given"


@pytest.mark.parametrize(("data", "gpus", "message"), [
    ({"llamacpp_build": "rocm"}, [], "llamacpp_build: 'rocm' is not one of auto, cpu, cuda"),
    ({"llamacpp_build": "cuda"}, [], "llamacpp_build: cuda, but nvidia-smi on this host shows no NVIDIA GPU"),
    ({}, [{"compute_cap": "6.1"}], "llamacpp_build: this host's GPUs: --arch 6.1: a llama.cpp CUDA 13.0 build "
                                   "cannot target it: CUDA 13.0 dropped Pascal"),
])
def test_what_cannot_work_is_refused_in_one_line(data: dict, gpus: list, message: str) -> None:
    with pytest.raises(DeployError) as caught:
        build_choice(data, gpus)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_libraries_go_where_the_binary_s_runpath_looks() -> None:
    assert guest_lib_dir("/usr/local/bin/llama-server") == "/usr/local/lib/llama-server"
    assert guest_lib_dir("/opt/llama/bin/llama-server") == "/opt/llama/lib/llama-server"


def test_the_cuda_build_s_files_come_from_its_cache_with_their_recorded_sha256(cache: Path) -> None:
    files = server_files(build_choice({}, [RTX_3090]), {}, "/usr/local/bin/llama-server")
    assert [(Path(f.src).relative_to(cache).as_posix(), f.dest) for f in files] == [
        ("cuda13.0-sm86/bin/llama-server", "/usr/local/bin/llama-server"),
        ("cuda13.0-sm86/lib/llama-server/libcudart.so.13", "/usr/local/lib/llama-server/libcudart.so.13"),
        ("cuda13.0-sm86/lib/llama-server/libcublas.so.13", "/usr/local/lib/llama-server/libcublas.so.13"),
        ("cuda13.0-sm86/lib/llama-server/libcublasLt.so.13", "/usr/local/lib/llama-server/libcublasLt.so.13"),
    ]
    assert files[0].sha256 == hashlib.sha256(b"cuda build").hexdigest()


def test_settings_follow_the_gpu_facts(cache: Path) -> None:
    on_gpu = settings_from({}, [RTX_3090])
    assert on_gpu.build.kind == "cuda" and on_gpu.binary_sha256 == hashlib.sha256(b"cuda build").hexdigest()
    assert len(on_gpu.files) == 4
    on_cpu = settings_from({}, None)
    assert on_cpu.build.kind == "cpu" and on_cpu.binary_sha256 == hashlib.sha256(b"cpu build").hexdigest()


def test_a_damaged_cuda_cache_never_reaches_a_guest(cache: Path) -> None:
    lib = build.cuda_cache_dir(cuda.DEFAULT, ["86-real"]) / "lib" / "llama-server" / "libcublasLt.so.13"
    lib.write_bytes(b"truncated")
    with pytest.raises(DeployError, match=r"llamacpp_build: .*libcublasLt.so.13 has sha256 [0-9a-f]{64}, its build "
                                          r"recorded [0-9a-f]{64}: the cache is damaged"):
        server_files(build_choice({}, [RTX_3090]), {}, "/usr/local/bin/llama-server")


def test_a_cuda_build_not_built_yet_names_the_command(cache: Path) -> None:
    with pytest.raises(DeployError, match=r"build it once with `labwright build llamacpp --arch 8.6 "
                                          r"--arch 12.0`"):
        server_files(build_choice({}, [RTX_3090, RTX_5090]), {}, "/usr/local/bin/llama-server")
