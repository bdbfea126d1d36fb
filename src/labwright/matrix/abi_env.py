"""Find what the ABI verifier checks: the environment's torch, its site directories, their compiled files,
and which installed distribution (with which version label) each file came from."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from labwright.errors import BadInput
from labwright.matrix.elfsyms import SHARED_OBJECT, is_elf
from labwright.textio import loads_json

# Asks the environment's own Python where it looks for packages and where torch is, without importing torch
# (find_spec on a top-level name only searches sys.path).
PROBE = r"""
import importlib.util, json, sys, sysconfig
spec = importlib.util.find_spec("torch")
locations = list(spec.submodule_search_locations or []) if spec else []
print(json.dumps({"executable": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3], "path": sys.path,
                  "stdlib": [sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")], "torch": locations}))
"""

LOCAL_TORCH = re.compile(r"(?a)(?:torch|pt)(\d+\.\d+(?:\.\d+)?)")
PRUNE = re.compile(r"^(?:__pycache__|.*\.dist-info|.*\.egg-info)$")


@dataclass
class TorchInstall:
    root: Path  # the torch package directory
    version: str | None
    libs: dict[str, Path]  # file name -> path, every ELF shared object in torch/lib
    global_libs: list[str]  # what `import torch` loads with RTLD_GLOBAL (libtorch_global_deps.so)

    @property
    def lib_dir(self) -> Path:
        return self.root / "lib"


@dataclass
class Environment:
    python: str | None  # the interpreter that imports run under; None: static checks only
    site_dirs: list[Path]
    torch: TorchInstall


@dataclass
class Distribution:
    name: str
    version: str
    requires: list[str] = field(default_factory=list)


def environment_for_python(python: str) -> Environment:
    """Inspect the environment behind an interpreter (or a venv directory): BadInput when it isn't one."""
    interpreter = _interpreter(Path(python))
    try:
        proc = subprocess.run([str(interpreter), "-I", "-c", PROBE], capture_output=True, text=True, timeout=60)
        probe = loads_json(proc.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise not_a_python(python, _first_line(exc)) from exc
    return environment_from_probe(python, interpreter, probe)


def not_a_python(python: str, reason: str) -> BadInput:
    return BadInput(f"{python}: not a working Python interpreter ({reason}); pass --python /path/to/venv/bin/python")


def interpreter_for(python: str) -> Path:
    """The interpreter named by --python (a venv directory means its bin/python): BadInput when there is none."""
    return _interpreter(Path(python))


def environment_from_probe(python: str, interpreter: Path, probe: dict) -> Environment:
    """The Environment from what PROBE (or the importer child's probe) printed under ``interpreter``."""
    stdlib = {os.path.realpath(p) for p in probe["stdlib"] if p}
    site_dirs: list[Path] = []
    for entry in probe["path"]:
        real = os.path.realpath(entry) if entry else ""
        if (not real or not os.path.isdir(real) or real in stdlib or real.endswith("lib-dynload")
                or Path(real) in site_dirs):
            continue
        site_dirs.append(Path(real))
    if not probe["torch"]:
        raise BadInput(f"{python}: torch is not installed in this environment; install it there "
                       f"(`{interpreter} -m pip install torch`) or pass --python for the environment that has it")
    return Environment(python=str(interpreter), site_dirs=site_dirs, torch=torch_install(Path(probe["torch"][0])))


def environment_for_site_packages(site_packages: Path) -> Environment:
    if not site_packages.is_dir():
        raise BadInput(f"{site_packages}: not a directory; pass --site-packages .../lib/python3.X/site-packages")
    torch_dir = site_packages / "torch"
    if not (torch_dir / "lib").is_dir():
        raise BadInput(f"{site_packages}: no torch installed here (no torch/lib); pass the site-packages that "
                       "holds torch, or --python for the environment")
    real = Path(os.path.realpath(site_packages))
    return Environment(python=python_for_site_packages(real), site_dirs=[real], torch=torch_install(torch_dir))


def python_for_site_packages(site_packages: Path) -> str | None:
    """The interpreter that owns a site-packages directory, when it can be told from the layout."""
    for parent in site_packages.parents:
        if (parent / "pyvenv.cfg").is_file():
            for name in ("python", "python3"):
                candidate = parent / "bin" / name
                if candidate.exists():
                    return str(candidate)
    # A system or pyenv layout: <prefix>/lib/python3.X/site-packages with <prefix>/bin/python3.X
    if len(site_packages.parents) >= 3 and re.fullmatch(r"(?a)python\d+\.\d+", site_packages.parent.name):
        candidate = site_packages.parents[2] / "bin" / site_packages.parent.name
        if candidate.exists():
            return str(candidate)
    return None


def torch_install(root: Path) -> TorchInstall:
    root = Path(os.path.realpath(root))
    lib_dir = root / "lib"
    if not lib_dir.is_dir():
        raise BadInput(f"{root}: torch has no lib directory (not a binary torch install); reinstall torch there")
    libs = {p.name: p for p in sorted(lib_dir.iterdir()) if SHARED_OBJECT.search(p.name) and p.is_file()
            and is_elf(p)}
    if not libs:
        raise BadInput(f"{lib_dir}: no shared libraries in torch/lib; reinstall torch there")
    global_libs = ["libtorch_global_deps.so"] if "libtorch_global_deps.so" in libs else []
    return TorchInstall(root=root, version=_torch_version(root), libs=libs, global_libs=global_libs)


def _torch_version(root: Path) -> str | None:
    try:
        match = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", (root / "version.py").read_text(), re.M)
    except OSError:
        match = None
    if match:
        return match.group(1)
    for dist_info in root.parent.glob("torch-*.dist-info"):
        return _metadata(dist_info).version
    return None


def _interpreter(path: Path) -> Path:
    if path.is_dir():
        for name in ("bin/python", "bin/python3", "Scripts/python.exe"):
            if (path / name).exists():
                return path / name
        raise BadInput(f"{path}: a directory but not a virtualenv (no bin/python); pass the venv or its python")
    if not path.exists():
        raise BadInput(f"{path}: no such file; pass --python /path/to/venv/bin/python")
    if not os.access(path, os.X_OK):
        raise BadInput(f"{path}: not executable, so not a Python interpreter; pass --python /path/to/venv/bin/python")
    return path


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# -- compiled files and who installed them -------------------------------------------------------------------
def shared_objects(env: Environment) -> list[tuple[Path, Path]]:
    """Every .so under the site directories except torch's own files, as (path, the site dir it is under)."""
    seen: set[str] = set()
    found: list[tuple[Path, Path]] = []
    torch_root = str(env.torch.root)
    site_set = {str(d) for d in env.site_dirs}
    for site_dir in env.site_dirs:
        for dirpath, dirnames, filenames in os.walk(site_dir):
            # Prune torch itself (what is checked against, not a consumer), metadata, caches, and site dirs
            # nested in this one (walked on their own, so module names come out relative to the right root).
            dirnames[:] = [d for d in dirnames if not PRUNE.match(d)
                           and os.path.join(dirpath, d) != torch_root and os.path.join(dirpath, d) not in site_set]
            for name in filenames:
                if not SHARED_OBJECT.search(name):
                    continue
                path = os.path.join(dirpath, name)
                real = os.path.realpath(path)
                if real in seen or not os.path.isfile(real):
                    continue
                seen.add(real)
                found.append((Path(path), site_dir))
    return found


def module_name(path: Path, site_dir: Path) -> str:
    """flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so -> flash_attn_2_cuda; pkg/_C.abi3.so -> pkg._C."""
    parts = list(path.relative_to(site_dir).parts)
    parts[-1] = parts[-1].split(".", 1)[0]
    return ".".join(parts)


def owners(site_dirs: list[Path]) -> dict[str, Path]:
    """Map each compiled file listed in a RECORD to its .dist-info directory (only .so lines are kept)."""
    owned: dict[str, Path] = {}
    for site_dir in site_dirs:
        for dist_info in site_dir.glob("*.dist-info"):
            try:
                text = (dist_info / "RECORD").read_text(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                path = line.rsplit(",", 2)[0] if line.count(",") >= 2 else line
                if SHARED_OBJECT.search(path):
                    owned[os.path.normpath(os.path.join(site_dir, path))] = dist_info
    return owned


def _metadata(dist_info: Path) -> Distribution:
    name = version = ""
    requires: list[str] = []
    try:
        text = (dist_info / "METADATA").read_text(errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        if not line.strip():
            break  # headers end at the first blank line; the long description follows
        key, _, value = line.partition(":")
        if key == "Name":
            name = value.strip()
        elif key == "Version":
            version = value.strip()
        elif key == "Requires-Dist":
            requires.append(value.strip())
    if not name:
        name, _, version = dist_info.name[: -len(".dist-info")].partition("-")
    return Distribution(name=name, version=version, requires=requires)


def distribution(dist_info: Path, cache: dict[Path, Distribution]) -> Distribution:
    if dist_info not in cache:
        cache[dist_info] = _metadata(dist_info)
    return cache[dist_info]


def built_for_torch(dist: Distribution | None) -> tuple[str | None, str | None]:
    """(torch version the wheel was built for, how we know), from its local version label or a torch== pin."""
    if dist is None:
        return None, None
    local = dist.version.partition("+")[2]
    match = LOCAL_TORCH.search(local)
    if match:
        return match.group(1), f"version label +{local}"
    # packaging only here: most wheels say their torch in the version label (checked above), and a cached run
    # needs neither (imported lazily, as a cached `labwright stack verify` is mostly start-up).
    from packaging.requirements import InvalidRequirement, Requirement

    for line in dist.requires:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name.lower() != "torch" or (requirement.marker and "extra" in str(requirement.marker)):
            continue
        pins = [spec.version for spec in requirement.specifier if spec.operator in ("==", "===")]
        if len(pins) == 1:
            return pins[0].partition("+")[0], f"Requires-Dist {requirement}"
    return None, None


def same_minor(built_for: str, installed: str | None) -> bool:
    """Whether a build's torch and the installed torch agree on major.minor (labels carry no more, often)."""
    if installed is None:
        return True
    from packaging.version import InvalidVersion, Version

    try:
        a, b = Version(built_for), Version(installed)
    except InvalidVersion:
        return True
    return (a.major, a.minor) == (b.major, b.minor)
