"""Real wheels for tests: write them, compile the .so files in them with g++, install them with real pip.

Used by the ABI verifier's tests and reusable by anything that needs a local wheelhouse (the stack switch):

- ``write_wheel`` zips files + METADATA/WHEEL/RECORD into a wheel pip accepts;
- ``build_standin_torch`` makes a ``torch`` wheel whose ``torch/lib/libc10.so`` is compiled here and exports
  C++ symbols; API 1 and API 2 differ the way torch minors do (``c10::cuda::SetDevice(int)`` became
  ``SetDevice(signed char)``, ``c10::detail::legacy_api(int)`` was removed);
- ``build_standin_extension`` compiles a real CPython extension module against one stand-in torch, linked to its
  libc10.so through ``$ORIGIN/../torch/lib`` as flash-attn and friends are;
- ``Venv`` is a real ``python -m venv`` that pip installs into from a wheelhouse, offline.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from labwright import paths

STANDIN_HEADER = """\
#pragma once
// Stand-in for torch's c10 headers, API {api}.
#include <string>
#define STANDIN_TORCH_API {api}
namespace c10 {{
#if STANDIN_TORCH_API == 1
using DeviceIndex = int;
#else
using DeviceIndex = signed char;  // torch narrowed DeviceIndex: SetDevice's mangled name changed with it
#endif
namespace cuda {{
int SetDevice(DeviceIndex device);
int c10_cuda_check_implementation(int err, const char* file, const char* func, int line, bool assertions);
}}  // namespace cuda
std::string version_string();
namespace detail {{
#if STANDIN_TORCH_API == 1
int legacy_api(int value);
#else
int new_api(int value);
#endif
}}  // namespace detail
}}  // namespace c10
"""

STANDIN_LIBC10 = """\
#include <c10/standin.h>
namespace c10 {
namespace cuda {
int SetDevice(DeviceIndex device) { return static_cast<int>(device); }
int c10_cuda_check_implementation(int err, const char*, const char*, int, bool) { return err; }
}  // namespace cuda
std::string version_string() { return STANDIN_TORCH_VERSION; }
namespace detail {
#if STANDIN_TORCH_API == 1
int legacy_api(int value) { return value + 1; }
#else
int new_api(int value) { return value + 2; }
#endif
}  // namespace detail
}  // namespace c10
"""

STANDIN_TORCH_INIT = '''\
"""Stand-in torch for tests: torch/lib/libc10.so and nothing else."""
import ctypes
import os

from torch.version import __version__

# Like real torch, load the core library when torch is imported, before any extension needs it.
_c10 = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libc10.so"))
'''

STANDIN_EXTENSION = """\
#include <Python.h>
#include <c10/standin.h>

static PyObject* set_device(PyObject*, PyObject* arg) {
  long device = PyLong_AsLong(arg);
  if (device == -1 && PyErr_Occurred()) return nullptr;
  int result = c10::cuda::SetDevice(static_cast<c10::DeviceIndex>(device));
  result = c10::cuda::c10_cuda_check_implementation(result, __FILE__, __func__, __LINE__, false);
#if STANDIN_TORCH_API == 1
  result = c10::detail::legacy_api(result) - 1;
#else
  result = c10::detail::new_api(result) - 2;
#endif
  return PyLong_FromLong(result);
}

static PyObject* torch_version(PyObject*, PyObject*) {
  return PyUnicode_FromString(c10::version_string().c_str());
}

static PyMethodDef methods[] = {
    {"set_device", set_device, METH_O, "c10::cuda::SetDevice through the linked libc10.so"},
    {"torch_version", torch_version, METH_NOARGS, "the version string libc10.so was built with"},
    {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
"""


def normalize(name: str) -> str:
    return name.replace("-", "_").replace(".", "_")


def python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def platform_tag() -> str:
    return f"linux_{platform.machine()}"


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(wheelhouse: Path, name: str, version: str, files: dict[str, bytes | Path],
                requires: list[str] | None = None, tag: str | None = None) -> Path:
    """Write ``{name}-{version}-{tag}.whl`` with these files (archive path -> bytes or a file to copy)."""
    tag = tag or f"{python_tag()}-{python_tag()}-{platform_tag()}"
    dist_info = f"{normalize(name)}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Requires-Dist: {r}" for r in requires or []]
    contents = {arcname: data.read_bytes() if isinstance(data, Path) else data for arcname, data in files.items()}
    contents[f"{dist_info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    contents[f"{dist_info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: support.wheels\n"
                                      f"Root-Is-Purelib: false\nTag: {tag}\n").encode()
    record = [f"{arcname},{record_hash(data)},{len(data)}" for arcname, data in contents.items()]
    record.append(f"{dist_info}/RECORD,,")
    contents[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheelhouse.mkdir(parents=True, exist_ok=True)
    target = wheelhouse / f"{normalize(name)}-{version}-{tag}.whl"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for arcname, data in contents.items():
            info = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))
            # Shared objects keep their execute bit, as in real wheels.
            info.external_attr = (0o755 if ".so" in arcname else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return target


def compile_shared(output: Path, source: str, *, include_dirs: Sequence[Path] = (),
                   library_dirs: Sequence[Path] = (), libraries: Sequence[str] = (),
                   rpath: str | None = None, soname: str | None = None, defines: dict[str, str] | None = None,
                   extra: list[str] | None = None) -> Path:
    """Compile one C++ source text into a shared object with g++; raise with the compiler's output on failure."""
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="labwright-cc-") as tmp:
        # The source goes elsewhere: beside the output it would end up in torch/lib or a wheel's tree.
        source_file = Path(tmp) / "source.cpp"
        source_file.write_text(source)
        return _compile(output, source_file, include_dirs, library_dirs, libraries, rpath, soname, defines, extra)


def _compile(output: Path, source_file: Path, include_dirs: Sequence[Path], library_dirs: Sequence[Path],
             libraries: Sequence[str], rpath: str | None, soname: str | None, defines: dict[str, str] | None,
             extra: list[str] | None) -> Path:
    command = ["g++", "-shared", "-fPIC", "-O1", "-std=c++17", "-o", str(output), str(source_file)]
    command += [f"-I{d}" for d in include_dirs]
    command += [f"-D{k}={v}" for k, v in (defines or {}).items()]
    command += [f"-L{d}" for d in library_dirs] + [f"-l{lib}" for lib in libraries]
    if rpath:
        command.append(f"-Wl,-rpath,{rpath}")
    if soname:
        command.append(f"-Wl,-soname,{soname}")
    command += extra or []
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"g++ failed ({shlex.join(command)}):\n{proc.stderr}")
    return output


def ext_suffix() -> str:
    return str(sysconfig.get_config_var("EXT_SUFFIX"))


@dataclass
class StandinTorch:
    version: str
    api: int
    tree: Path  # an unpacked copy: <tree>/torch/{include,lib}, what extensions are compiled against
    wheel: Path

    @property
    def include_dir(self) -> Path:
        return self.tree / "torch" / "include"

    @property
    def lib_dir(self) -> Path:
        return self.tree / "torch" / "lib"


def build_standin_torch(wheelhouse: Path, workdir: Path, version: str, api: int) -> StandinTorch:
    """A ``torch`` wheel (tagged for this Python) whose libc10.so exports the stand-in API ``api`` (1 or 2)."""
    tree = workdir / f"torch-{version}"
    (tree / "torch" / "include" / "c10").mkdir(parents=True, exist_ok=True)
    header = tree / "torch" / "include" / "c10" / "standin.h"
    header.write_text(STANDIN_HEADER.format(api=api))
    libc10 = compile_shared(tree / "torch" / "lib" / "libc10.so", STANDIN_LIBC10,
                            include_dirs=[tree / "torch" / "include"], soname="libc10.so",
                            defines={"STANDIN_TORCH_VERSION": f'"{version}"'})
    files: dict[str, bytes | Path] = {
        "torch/__init__.py": STANDIN_TORCH_INIT.encode(),
        "torch/version.py": f"__version__ = {version!r}\n".encode(),
        "torch/lib/libc10.so": libc10,
        "torch/include/c10/standin.h": header,
    }
    wheel = write_wheel(wheelhouse, "torch", version, files)
    return StandinTorch(version=version, api=api, tree=tree, wheel=wheel)


def build_standin_extension(wheelhouse: Path, workdir: Path, torch: StandinTorch, *, name: str = "standin_attn",
                            version: str | None = None) -> Path:
    """A wheel with package ``name`` and extension ``name._C`` compiled against ``torch`` (one stand-in API).

    Its version carries the build's torch in its local label (``1.0.0+torch2.9``), as prebuilt flash-attn does.
    """
    major_minor = ".".join(torch.version.split("+")[0].split(".")[:2])
    version = version or f"1.0.0+torch{major_minor}"
    build = workdir / f"{name}-{version}"
    extension = compile_shared(
        build / f"_C{ext_suffix()}", STANDIN_EXTENSION,
        include_dirs=[torch.include_dir, Path(sysconfig.get_paths()["include"])],
        library_dirs=[torch.lib_dir], libraries=["c10"], rpath="$ORIGIN/../torch/lib")
    files: dict[str, bytes | Path] = {
        f"{name}/__init__.py": f"import torch  # noqa: F401  (loads libc10 first, as real extensions do)\n"
                               f"from {name} import _C\n".encode(),
        f"{name}/_C{ext_suffix()}": extension,
    }
    return write_wheel(wheelhouse, name, version, files)


class Venv:
    """A real virtual environment; ``install`` runs real pip, offline, from a local wheelhouse."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, path: Path, python: str = sys.executable, with_pip: bool = False) -> Venv:
        args = [python, "-m", "venv", str(path)]
        if not with_pip:
            # Installs run this interpreter's pip with --python: no pip copy per venv, seconds faster each.
            args.append("--without-pip")
        subprocess.run(args, check=True, capture_output=True)
        return cls(path)

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return self.path / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"

    def pip(self, *args: str, isolated: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        if isolated:
            # No machine pip.conf (extra indexes, find-links, torch caps): only what the test passes applies.
            env["PIP_CONFIG_FILE"] = os.devnull
        command = [sys.executable, "-m", "pip", "--python", str(self.python), "--disable-pip-version-check", *args]
        proc = subprocess.run(command, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"pip failed ({shlex.join(command)}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def install(self, wheelhouse: Path, *requirements: str, no_deps: bool = False) -> None:
        args = ["install", "--no-index", "--find-links", str(wheelhouse), *requirements]
        if no_deps:
            args.append("--no-deps")
        self.pip(*args)

    def run_python(self, code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.python), "-I", "-c", code], capture_output=True, text=True)


# -- real torch ----------------------------------------------------------------------------------------------
# A small extension that calls c10 and ATen through their C++ API, compiled by torch.utils.cpp_extension.
# at::qr is deliberate: torch 2.14 removed it (at::_ops::qr::call is exported by 2.13's libtorch_cpu.so and not
# by 2.14's), so a build against 2.13 is a real, known cross-version ABI break to test against.
TORCH_EXTENSION_SOURCE = """\
#include <Python.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/qr.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

static PyObject* qr_rows(PyObject*, PyObject* arg) {
  long n = PyLong_AsLong(arg);
  if (n == -1 && PyErr_Occurred()) return nullptr;
  try {
    TORCH_CHECK(n > 0, "n must be positive, got ", n);
    auto qr = at::qr(at::eye(n), true);
    return PyLong_FromLong(static_cast<long>(std::get<0>(qr).size(0)));
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
    return nullptr;
  }
}

static PyObject* allocator_ok(PyObject*, PyObject*) {
  return PyBool_FromLong(c10::GetCPUAllocator() != nullptr);
}

static PyMethodDef methods[] = {
    {"qr_rows", qr_rows, METH_O, "rows of Q from at::qr(at::eye(n))"},
    {"allocator_ok", allocator_ok, METH_NOARGS, "c10::GetCPUAllocator() is set"},
    {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
"""

TORCH_EXTENSION_SETUP = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name={name!r},
    version={version!r},
    packages=[{name!r}],
    ext_modules=[CppExtension({name!r} + "._C", [{source!r}], extra_compile_args=["-O0", "-g0"])],
    cmdclass={{"build_ext": BuildExtension.with_options(use_ninja=False)}},
    install_requires=[{requires!r}],
)
"""


def test_env_root() -> Path:
    """Where reusable test environments live: $LABWRIGHT_CACHE/test-envs (default ~/.cache/labwright)."""
    base = str(paths.cache_root())
    return Path(base) / "test-envs"


def torch_venv(version: str, *, no_deps: bool = False) -> Venv:
    """A venv with the real ``torch==version`` from pip's usual sources, made once and reused across runs.

    pip, not uv: on these machines pip's configuration points at the torch wheels on local disk. ``no_deps``
    installs torch alone (a CUDA build without its nvidia-* wheels: enough to read its libraries' symbols,
    not to import it).
    """
    root = test_env_root()
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"torch-{version}{'-nodeps' if no_deps else ''}"
    ready = path / ".labwright-ready"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes must not build the same venv at once
        if not ready.exists():
            shutil.rmtree(path, ignore_errors=True)  # a half-made one from an interrupted run
            venv = Venv.create(path, with_pip=True)
            extra = ["--no-deps"] if no_deps else []
            venv.pip("install", "-q", f"torch=={version}", "setuptools", *extra, isolated=False)
            ready.write_text(version)
    return Venv(path)


def overlay_venv(path: Path, base: Venv) -> Venv:
    """A fresh venv that also sees ``base``'s site-packages (through a .pth file): installs go here, so the
    shared torch venv stays as pip made it."""
    venv = Venv.create(path)
    (venv.site_packages / "_labwright_overlay.pth").write_text(f"{base.site_packages}\n")
    return venv


def build_torch_extension_wheel(torch_env: Venv, wheelhouse: Path, workdir: Path, *,
                                name: str = "torch_abi_probe", source: str = TORCH_EXTENSION_SOURCE) -> Path:
    """Compile ``source`` as ``name._C`` with torch.utils.cpp_extension in ``torch_env`` and wheel it.

    The wheel pins ``torch==<that torch>`` and carries it in its local label, as exllamav3's wheels do. Built
    wheels are kept under the test-env cache by (source, torch version), since compiling ATen headers takes
    ~10 s.
    """
    torch_version = torch_env.run_python("import torch.version; print(torch.version.__version__)").stdout.strip()
    if not torch_version:
        raise RuntimeError(f"{torch_env.path}: torch is not importable there")
    base, _, local = torch_version.partition("+")
    version = f"1.0.0+{local + '.' if local else ''}torch{base}"
    digest = hashlib.sha256(f"{name}\0{version}\0{source}".encode()).hexdigest()[:16]
    built = test_env_root() / "wheels" / digest
    wheels = sorted(built.glob("*.whl")) if built.is_dir() else []
    if not wheels:
        project = workdir / f"{name}-src"
        (project / name).mkdir(parents=True, exist_ok=True)
        (project / name / "__init__.py").write_text(f"import torch  # noqa: F401\nfrom {name} import _C\n")
        (project / name / "_C.cpp").write_text(source)
        (project / "setup.py").write_text(TORCH_EXTENSION_SETUP.format(
            name=name, version=version, source=f"{name}/_C.cpp", requires=f"torch=={base}"))
        (project / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n')
        out = workdir / f"{name}-dist"
        proc = subprocess.run([str(torch_env.python), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                               "--no-index", "-w", str(out), str(project)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"building {name} against torch {torch_version} failed:\n{proc.stdout}\n{proc.stderr}")
        built.mkdir(parents=True, exist_ok=True)
        for wheel in out.glob("*.whl"):
            shutil.copy2(wheel, built / wheel.name)
        wheels = sorted(built.glob("*.whl"))
    wheelhouse.mkdir(parents=True, exist_ok=True)
    target = wheelhouse / wheels[0].name
    shutil.copy2(wheels[0], target)
    return target
