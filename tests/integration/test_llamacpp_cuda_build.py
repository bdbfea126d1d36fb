"""llama.cpp's CUDA build, compile-tested for real without a GPU: NVIDIA's pip CUDA 13.0 toolkit (downloaded once,
cached in ~/.cache/labwright/cuda/), the pinned llama.cpp source, cmake configured the way
labwright.llamacpp.build configures the GPU build, and real ggml-cuda translation units compiled by the real nvcc for
the architectures the GPU facts name; cuobjdump (NVIDIA's, from the same wheels) then lists the SASS each object
carries. A full CUDA build of llama-server takes far longer on 2 cores (benchmarks/llamacpp_cuda_build.py).

Running the binary needs a GPU: scripts/gpu-check/llamacpp-cuda.sh does that where one is lent.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labwright.gpu.arch import capabilities_of
from labwright.llamacpp import build, cuda

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
#: The two cheapest ggml-cuda translation units of the pinned source (1.1 kB and 1.2 kB of .cu, ~4 s each here).
OBJECTS = ("fill", "arange")


def object_target(name: str) -> str:
    return f"ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/{name}.cu.o"


@pytest.fixture(scope="module")
def toolkit() -> Path:
    return cuda.ensure_toolkit(cuda.DEFAULT)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Kept beside the CPU build's cache (the CUDA builds reuse it); 76 MB once.
    sdist = build.download_sdist(build.cache_dir(), build.PINNED)
    return build.unpack_source(sdist, tmp_path_factory.mktemp("llama-src"))


def configure_and_compile(source: Path, toolkit: Path, build_dir: Path, capabilities: list[str]) -> dict[str, str]:
    archs = cuda.architectures(capabilities, cuda.DEFAULT)
    build.configure(source, build_dir, build_dir.parent / f"{build_dir.name}.log", build.cuda_flags(toolkit, archs))
    started = time.monotonic()
    subprocess.run(["ninja", "-C", str(build_dir), *(object_target(name) for name in OBJECTS)], check=True,
                   capture_output=True, text=True)
    print(f"compiled {len(OBJECTS)} ggml-cuda objects for {archs} in {time.monotonic() - started:.1f} s")
    entries = (line for line in (build_dir / "CMakeCache.txt").read_text().splitlines()
               if "=" in line and ":" in line.split("=")[0] and not line.startswith(("//", "#")))
    return {line.split(":")[0]: line.split("=", 1)[1] for line in entries}


def test_the_cuda_build_configures_with_the_pip_toolkit_and_compiles_sass_for_the_gpu_facts_architectures(
        toolkit: Path, source: Path, tmp_path: Path) -> None:
    # The GPU facts as labwright.facts.nvidia.NvidiaGpus reports them: an RTX 3090 and an RTX 5090.
    gpus = [{"index": 0, "name": "NVIDIA GeForce RTX 3090", "compute_cap": "8.6"},
            {"index": 1, "name": "NVIDIA GeForce RTX 5090", "compute_cap": "12.0"}]
    cache = configure_and_compile(source, toolkit, tmp_path / "build", list(capabilities_of(gpus)))
    assert cache["CMAKE_CUDA_ARCHITECTURES"] == "86-real;120a-real"
    assert cache["CMAKE_CUDA_COMPILER"] == str(toolkit / "bin" / "nvcc")
    assert cache["GGML_CUDA"] == "ON"
    configure_log = (tmp_path / "build.configure.log").read_text()
    assert re.search(r"Found CUDAToolkit: .* \(found version \"13\.0\.\d+\"\)", configure_log), configure_log[-3000:]
    assert "The CUDA compiler identification is NVIDIA 13.0" in configure_log
    for name in OBJECTS:
        obj = tmp_path / "build" / object_target(name)
        assert cuda.sass_architectures(obj, toolkit) == ["sm_120a", "sm_86"], name
        listing = subprocess.run([str(toolkit / "bin" / "cuobjdump"), "--list-elf", str(obj)], capture_output=True,
                                 text=True, check=True).stdout
        assert re.findall(r"sm_\w+", listing) == ["sm_86", "sm_120a"], listing
        # "-real" is SASS only: no PTX for a driver to JIT, as llama.cpp's native build.
        ptx = subprocess.run([str(toolkit / "bin" / "cuobjdump"), "--list-ptx", str(obj)], capture_output=True,
                             text=True, check=False)
        assert "PTX file" not in ptx.stdout, ptx.stdout


def test_another_gpu_gets_its_own_architecture_only(toolkit: Path, source: Path, tmp_path: Path) -> None:
    gpus = [{"index": 0, "name": "NVIDIA GeForce RTX 4090", "compute_cap": "8.9"}]
    cache = configure_and_compile(source, toolkit, tmp_path / "build", list(capabilities_of(gpus)))
    assert cache["CMAKE_CUDA_ARCHITECTURES"] == "89-real"
    for name in OBJECTS:
        assert cuda.sass_architectures(tmp_path / "build" / object_target(name), toolkit) == ["sm_89"]


LINKED_LIKE_LLAMA_SERVER = {
    "CMakeLists.txt": """cmake_minimum_required(VERSION 3.18)
project(linked_like_llama_server LANGUAGES CXX CUDA)
find_package(CUDAToolkit REQUIRED)
add_executable(probe probe.cu)
target_link_libraries(probe PRIVATE CUDA::cudart CUDA::cublas)  # what ggml-cuda links (CMakeLists.txt line 178)
""",
    "probe.cu": """#include <cstdio>
#include <cublas_v2.h>
__global__ void add_one(float *x) { x[threadIdx.x] += 1.0f; }
int main() {
    int devices = -1;
    cudaError_t err = cudaGetDeviceCount(&devices);
    cublasHandle_t handle;
    std::printf("cudart: %s; cublasCreate: %d\\n", cudaGetErrorString(err), (int)cublasCreate(&handle));
    return 0;
}
""",
}


def test_a_cuda_executable_linked_like_llama_server_finds_its_libraries_beside_it(
        toolkit: Path, tmp_path: Path) -> None:
    """The link half of the build, which the object test does not reach: CUDA::cudart and CUDA::cublas from the pip
    toolkit, the RUNPATH cuda_flags set, and the cache's bin/ + lib/llama-server/ layout (also the guest's)."""
    project = tmp_path / "project"
    project.mkdir()
    for name, text in LINKED_LIKE_LLAMA_SERVER.items():
        (project / name).write_text(text)
    flags = [flag for flag in build.cuda_flags(toolkit, ["86-real"]) if not flag.startswith("-DGGML_")]
    subprocess.run(["cmake", "-S", str(project), "-B", str(tmp_path / "b"), "-G", "Ninja", *flags], check=True,
                   capture_output=True, text=True)
    subprocess.run(["ninja", "-C", str(tmp_path / "b")], check=True, capture_output=True, text=True)
    layout = tmp_path / "layout"
    (layout / "bin").mkdir(parents=True)
    (layout / "lib" / "llama-server").mkdir(parents=True)
    (tmp_path / "b" / "probe").rename(layout / "bin" / "probe")
    dynamic = subprocess.run(["readelf", "-d", str(layout / "bin" / "probe")], capture_output=True, text=True,
                             check=True).stdout
    assert "Library runpath: [$ORIGIN/../lib/llama-server]" in dynamic, dynamic
    assert "[libcudart.so.13]" in dynamic and "[libcublas.so.13]" in dynamic
    missing = subprocess.run([str(layout / "bin" / "probe")], capture_output=True, text=True, check=False)
    assert missing.returncode == 127, missing.stdout
    assert "error while loading shared libraries: libcu" in missing.stderr, missing.stderr
    for name in cuda.RUNTIME_LIBRARIES:
        (layout / "lib" / "llama-server" / name).symlink_to(cuda.library_path(toolkit, name))
    ran = subprocess.run([str(layout / "bin" / "probe")], capture_output=True, text=True, check=False)
    # No GPU and no driver here: the runtime loads and says so; cuBLAS loads (with cublasLt) and cannot initialise.
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("cudart: CUDA driver version is insufficient for CUDA runtime version"), ran.stdout
    assert re.search(r"cublasCreate: [1-9]", ran.stdout), ran.stdout


def test_a_gpu_cuda_13_cannot_compile_for_is_refused_in_one_line_before_anything_is_written(tmp_path: Path) -> None:
    env = {**os.environ, "LABWRIGHT_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run([sys.executable, "-m", "labwright", "build", "llamacpp", "--arch", "7.0"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("labwright: error: --arch 7.0: a llama.cpp CUDA 13.0 build cannot target it: ")
    assert "CUDA 13.0 dropped Volta" in lines[0] and "--cuda-root" in lines[0]
    assert result.stdout == ""
    assert not (tmp_path / "cache").exists()
