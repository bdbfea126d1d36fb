"""The CUDA toolkit for llama.cpp's GPU build, from NVIDIA's pip wheels, and the GPU facts -> CMAKE_CUDA_ARCHITECTURES.

Why the pip wheels and CUDA 13.0: Debian 12's non-free ``nvidia-cuda-toolkit`` is CUDA 11.8 (no Blackwell, no sm_120
before 12.8) and needs root and apt; the CUDA 12 wheels (``nvidia-cuda-nvcc-cu12`` 12.8.93 and 12.9.86, checked
2026-11) ship ptxas and libnvvm but no ``nvcc``, ``cicc`` or ``fatbinary``, so nothing can drive a build with them.
The CUDA 13 wheels carry a complete compiler: ``nvidia-cuda-nvcc`` (nvcc, cudafe++, fatbinary, nvlink, ptxas),
``nvidia-nvvm`` (cicc, libdevice), ``nvidia-cuda-crt`` (crt/ headers), ``nvidia-cuda-runtime`` (headers,
libcudart.so.13, libcudart_static.a), ``nvidia-cuda-cccl`` (cub/thrust), ``nvidia-cublas`` (headers, libcublas.so.13,
libcublasLt.so.13), all unpacking into one ``nvidia/cu13/{bin,include,lib,nvvm}`` tree; ``nvidia-cuda-cuobjdump``
(first on PyPI at 13.2) lists the SASS a build carries. The tree lacks what CMake's FindCUDAToolkit looks for by
the unversioned names (``libcudart.so``, ``libcublas.so``, ``libcublasLt.so``) and ``lib64``: ``ensure_toolkit``
adds those as symlinks, so ``CUDAToolkit_ROOT`` is the tree itself. There is no ``libcuda.so`` link stub in any
wheel, hence ``-DGGML_CUDA_NO_VMM=ON`` (llama.cpp then does not link the driver library; ggml/src/ggml-cuda/
CMakeLists.txt lines 181-185 of the pinned source) and the legacy memory pool.

CUDA 13.0 has no offline compiler for Maxwell, Pascal and Volta (labwright/data/gpu-arch.toml): such a GPU is refused
in one line naming a CUDA 12 toolkit (``--cuda-root``, e.g. NVIDIA's installer's /usr/local/cuda-12.9). Builds need
driver >= 580 on the GPU host (CUDA 13.0's minimum, its release notes' table 3).

Architectures follow llama.cpp's own rules (vendor/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt of the pinned
llama-cpp-python 0.3.36): a GGML_NATIVE build uses CMake's ``native`` list, one ``XY-real`` per GPU present (lines
40-41, 107-112); ``XY-real`` is SASS only, ``XY-virtual`` PTX only, no suffix both (lines 34-36); plain ``12X`` is
rewritten to the architecture-specific ``12Xa`` (lines 88-105: Blackwell's FP4 tensor-core instructions are not
forward compatible). We build what ``native`` would on the GPU host, from its facts: ``8.6`` -> ``86-real``,
``12.0`` -> ``120a-real``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from labwright import paths
from labwright.atomic import once_under_lock
from labwright.errors import BadInput, OperationFailed
from labwright.gpu import arch
from labwright.ui import progress


@dataclass(frozen=True)
class Wheel:
    project: str
    filename: str
    sha256: str
    size: int


@dataclass(frozen=True)
class CudaToolchain:
    """A CUDA toolkit: NVIDIA's pip wheels unpacked into the cache (``wheels``), or one already installed
    (``root``, e.g. /usr/local/cuda-12.9 from NVIDIA's installer)."""

    version: str  # "13.0"
    wheels: tuple[Wheel, ...] = ()
    root: Path | None = None

    @property
    def label(self) -> str:
        """``cuda13.0``: part of the build's cache key."""
        return f"cuda{self.version}"

    def toolkit_dir(self) -> Path:
        if self.root is not None:
            return self.root
        return paths.cache_path("cuda", f"pip-{self.version}")


# Pinned from PyPI's simple API (filename, sha256, size), 2026-11. The wheel tag is manylinux x86_64: the control
# machine builds for x86-64 guests.
PIP_CUDA_13_0 = CudaToolchain(version="13.0", wheels=(
    Wheel("nvidia-cuda-nvcc", "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
          "56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03", 37384532),
    Wheel("nvidia-nvvm", "nvidia_nvvm-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl",
          "c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0", 61601415),
    Wheel("nvidia-cuda-crt", "nvidia_cuda_crt-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
          "2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4", 134086),
    Wheel("nvidia-cuda-runtime",
          "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
          "7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548", 2243632),
    Wheel("nvidia-cuda-cccl", "nvidia_cuda_cccl-13.0.85-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
          "e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649", 3120526),
    Wheel("nvidia-cublas", "nvidia_cublas-13.0.2.14-py3-none-manylinux_2_27_x86_64.whl",
          "0cf238ffdbe46c00cb9aa98e7bca745c223a5ca5a53e686ac8b3e5a08fe80d6c", 420882912),
    Wheel("nvidia-cuda-cuobjdump",
          "nvidia_cuda_cuobjdump-13.2.86-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
          "d332c2ffe78e703ca0a3894be927f83124244e2acf0d792b8c12b4362d44d837", 343821),
))

DEFAULT = PIP_CUDA_13_0
TOOLCHAINS = {DEFAULT.version: DEFAULT}

#: The shared libraries a CUDA 13 llama-server loads (llama.cpp links CUDA::cudart and CUDA::cublas, CMakeLists.txt
#: line 178; cuBLAS loads cublasLt); they travel with the binary. libcuda.so.1 is the guest's driver userspace.
RUNTIME_LIBRARIES = ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13")


def runtime_libraries(cuda: CudaToolchain) -> tuple[str, ...]:
    """RUNTIME_LIBRARIES for this toolkit's major version (an installed CUDA 12: libcudart.so.12, ...)."""
    major = cuda.version.split(".")[0]
    return tuple(name.rsplit(".", 1)[0] + f".{major}" for name in RUNTIME_LIBRARIES)


def library_path(root: Path, name: str) -> Path:
    """Where a toolkit keeps ``name``: the wheels' lib/, an installer's lib64/ or targets/x86_64-linux/lib/."""
    for directory in ("lib", "lib64", "targets/x86_64-linux/lib"):
        if (root / directory / name).exists():
            return root / directory / name
    raise OperationFailed(f"{name} is not in {root}/lib, lib64 or targets/x86_64-linux/lib: not a complete toolkit")

_UNVERSIONED = {"libcudart.so": "libcudart.so.13", "libcublas.so": "libcublas.so.13",
                "libcublasLt.so": "libcublasLt.so.13"}


def toolchain(version: str | None = None, root: str | Path | None = None) -> CudaToolchain:
    """The pinned pip toolkit for ``version`` (default 13.0), or an installed one at ``root`` (its nvcc says the
    version). BadInput, one line, for a version with no pinned wheels or a root without nvcc."""
    if root is not None:
        base = Path(root).expanduser()
        found = installed_version(base)
        if found is None:
            raise BadInput(f"--cuda-root {base}: no bin/nvcc there; give a CUDA toolkit's root (the directory "
                           "holding bin/nvcc, e.g. /usr/local/cuda-12.9)")
        return CudaToolchain(version=found, root=base)
    wanted = version or DEFAULT.version
    major, minor = arch.parse_cuda(wanted)
    key = f"{major}.{minor if minor is not None else 0}"
    if key not in TOOLCHAINS:
        raise BadInput(f"--cuda {wanted}: labwright pins NVIDIA's pip toolkit for CUDA {', '.join(TOOLCHAINS)} only "
                       "(the CUDA 12 wheels ship no nvcc); pass --cuda-root for an installed toolkit")
    return TOOLCHAINS[key]


def installed_version(root: Path) -> str | None:
    """``13.0`` from ``ROOT/bin/nvcc --version`` ("release 13.0, V13.0.88"); None without an nvcc."""
    nvcc = root / "bin" / "nvcc"
    if not nvcc.is_file():
        return None
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"(?a)release (\d+\.\d+)", out)
    return match.group(1) if match else None


def cmake_architecture(capability: str) -> str:
    """One GPU's entry in CMAKE_CUDA_ARCHITECTURES, as llama.cpp's native build would write it: ``8.6`` ->
    ``86-real``; Blackwell consumer ``12.0`` -> ``120a-real`` (llama.cpp's 12X -> 12Xa rewrite)."""
    cap = arch.parse_capability(capability)
    major, minor = cap.split(".")
    number = f"{major}{minor}"
    suffix = "a" if re.fullmatch(r"(?a)12\d", number) else ""
    return f"{number}{suffix}-real"


def sm_name(cmake_arch: str) -> str:
    """``120a-real`` -> ``sm_120a``: the name cuobjdump gives the SASS for it."""
    return "sm_" + cmake_arch.removesuffix("-real").removesuffix("-virtual")


def architectures(capabilities: Iterable[str], cuda: CudaToolchain) -> list[str]:
    """CMAKE_CUDA_ARCHITECTURES for these GPUs (sorted, distinct), refusing a GPU the toolkit cannot compile for:
    BadInput naming the GPU, the toolkit and what to use instead."""
    caps = sorted({arch.parse_capability(cap) for cap in capabilities},
                  key=lambda cap: tuple(int(x) for x in cap.split(".")))
    if not caps:
        raise BadInput("--arch: no GPU architecture given; pass the GPUs' compute capability (nvidia-smi "
                       "--query-gpu=compute_cap), e.g. --arch 8.6")
    for cap in caps:
        reason = arch.why_not(cuda.version, cap)
        if reason is not None:
            target = arch.architecture(cap)
            wanted = f"CUDA >= {target.min_cuda}" + (f" and <= {target.max_cuda}" if target.max_cuda else "")
            raise BadInput(f"--arch {cap}: a llama.cpp CUDA {cuda.version} build cannot target it: {reason}; build "
                           f"with a {wanted} toolkit (--cuda-root DIR), or use the CPU build")
    return [cmake_architecture(cap) for cap in caps]


def build_key(cuda: CudaToolchain, cmake_archs: Sequence[str]) -> str:
    """``cuda13.0-sm86-sm120a``: the cache directory's name below the llama.cpp version."""
    return cuda.label + "-" + "-".join(sm_name(a).replace("_", "") for a in cmake_archs)


def _unpack(wheel_path: Path, into: Path) -> None:
    """The wheel's ``nvidia/cu13/`` tree into ``into`` (dist-info and the Python package markers left out)."""
    with zipfile.ZipFile(wheel_path) as archive:
        for info in archive.infolist():
            parts = info.filename.split("/")
            if len(parts) < 3 or parts[0] != "nvidia" or info.is_dir() or parts[-1] == "__init__.py":
                continue
            rel = Path(*parts[2:])
            if ".." in rel.parts:
                raise OperationFailed(f"{wheel_path.name}: unsafe member {info.filename}")
            target = into / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                target.chmod(mode)


def toolkit_ok(marker: Path, version: str) -> bool:
    """Whether the unpacked toolkit beside ``marker`` (its ``.complete``) is whole: the marker names ``version``
    (written last, in the staging tree renamed into place) and its nvcc runs and says that version. A marker that
    exists is not enough (class 26 of docs/reliability.md): emptied, written over, or an nvcc gone since, the toolkit
    is unpacked again."""
    from labwright.agent.zipapp import read_cached

    recorded = read_cached(marker, f"the CUDA {version} toolkit's completion marker", max_bytes=64)
    return recorded is not None and recorded.strip() == version.encode() and installed_version(marker.parent) == version


def _link_layout(root: Path) -> None:
    """What FindCUDAToolkit and nvcc.profile look for that the wheels do not ship: lib64 and the unversioned
    sonames (symlinks)."""
    lib = root / "lib"
    if not (root / "lib64").exists():
        (root / "lib64").symlink_to("lib")
    for name, target in _UNVERSIONED.items():
        if (lib / target).exists() and not (lib / name).exists():
            (lib / name).symlink_to(target)


def ensure_toolkit(cuda: CudaToolchain = DEFAULT) -> Path:
    """The toolkit's root (CUDAToolkit_ROOT), downloading and unpacking the pinned wheels once into
    ``~/.cache/labwright/cuda/pip-VERSION`` (each sha256 checked against the pin and PyPI's index; a lock keeps
    parallel runs from unpacking twice; the tree is renamed into place only when complete)."""
    root = cuda.toolkit_dir()
    if cuda.root is not None or toolkit_ok(root / ".complete", cuda.version):
        return root
    from labwright.llamacpp.build import download_pinned  # build imports this module

    with once_under_lock(root / ".complete", root.parent / f".pip-{cuda.version}.lock",
                         lambda marker: toolkit_ok(marker, cuda.version)) as todo:
        if not todo:
            return root
        total = sum(w.size for w in cuda.wheels) / 1e6
        with progress(f"CUDA {cuda.version} toolkit from NVIDIA's pip wheels ({total:.0f} MB, once; cached in "
                      f"{root})", heartbeat=False):
            wheels = root.parent / "wheels"
            wheels.mkdir(exist_ok=True)
            staging = root.with_name(root.name + ".new")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            for wheel in cuda.wheels:
                path = download_pinned(wheels, wheel.project, wheel.filename, wheel.sha256)
                with progress(f"unpack {wheel.filename}", heartbeat=False):
                    _unpack(path, staging)
            _link_layout(staging)
            found = installed_version(staging)
            if found != cuda.version:
                raise OperationFailed(f"the unpacked toolkit's nvcc says CUDA {found}, pinned {cuda.version}")
            (staging / ".complete").write_text(cuda.version + "\n")
            shutil.rmtree(root, ignore_errors=True)
            staging.rename(root)
            for wheel in cuda.wheels:  # unpacked, the wheels are 530 MB of duplicates
                (wheels / wheel.filename).unlink(missing_ok=True)
    return root


def cuobjdump(root: Path) -> Path | None:
    tool = root / "bin" / "cuobjdump"
    return tool if tool.is_file() else (Path(found) if (found := shutil.which("cuobjdump")) else None)


def sass_architectures(path: Path, root: Path) -> list[str]:
    """The SASS (cubin) architectures a binary or object carries, as ``cuobjdump --list-elf`` names them
    (``ELF file    1: acc.1.sm_86.cubin`` -> ``sm_86``)."""
    tool = cuobjdump(root)
    if tool is None:
        raise OperationFailed(f"no cuobjdump in {root}/bin or on PATH to list {path}'s SASS")
    result = subprocess.run([str(tool), "--list-elf", str(path)], capture_output=True, text=True, check=False,
                            env={**os.environ, "LC_ALL": "C"})
    if result.returncode != 0:
        raise OperationFailed(f"cuobjdump --list-elf {path}: {result.stderr.strip() or result.stdout.strip()}")
    return sorted(set(re.findall(r"(?a)\.(sm_\d+[af]?)\.cubin", result.stdout)))
