"""What a wheel was built against, read from the wheel itself where its name does not say.

Three witnesses, each optional, compared with each other and with the file name:
- the local version label (``+cu130torch2.11``, wheelname.py);
- METADATA: ``Version`` and the ``Requires-Dist`` pins on torch (``torch==2.11.0``) and on a CUDA runtime
  (``cuda-toolkit==13.0.2``, ``nvidia-cuda-runtime-cu12==12.8.90``), parsed with ``packaging``;
- the ``.so`` files: the CUDA runtime they link (``libcudart.so.13`` -> CUDA 13: the soname is per major), whether
  they link torch (libtorch*/libc10* or torch's C++ symbols), and which std::string ABI their symbols use.
A contradiction (METADATA says another version than the name; the label says cu12 and the .so links
libcudart.so.13; the label says torch 2.10 and Requires-Dist pins torch==2.11.0) is one line naming both.
"""

from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from labwright.errors import BadInput
from labwright.matrix.elfsyms import BrokenElf, cxx11_abi_hint, read_dynamic
from labwright.matrix.wheelname import WheelNameError, cuda_major, parse_wheel_filename

MAX_SO_BYTES = 2 * 1024**3  # a single .so larger than this is not read (torch's own libtorch_cuda is ~1.5 GB)



#: The environment a homelab GPU box evaluates a requirement's marker in (extras not asked for).
_LINUX = {"platform_system": "Linux", "sys_platform": "linux", "platform_machine": "x86_64", "extra": ""}


def linux_requirements(headers: Message) -> Iterator[Requirement]:
    """The Requires-Dist lines of a METADATA (parsed headers) that apply on x86_64 Linux; unparsable ones skipped."""
    for line in headers.get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate(_LINUX):
            yield req

@dataclass
class Inspection:
    filename: str
    package: str
    version: str  # as the name says
    metadata_version: str = ""
    torch: str = ""  # major.minor the wheel is built for, from the best witness
    torch_build: str = ""  # exact torch, when a pin or the label says
    cuda: str = ""  # as precise as the witnesses allow: "13.0" from the label/metadata, "13" from the .so only
    links_torch: bool = False
    cxx11_abi: str = ""  # "TRUE"/"FALSE" from the symbols
    evidence: list[str] = field(default_factory=list)  # "label: cu130 torch 2.11", "Requires-Dist: torch==2.11.0"
    contradictions: list[str] = field(default_factory=list)
    shared_objects: list[str] = field(default_factory=list)


def _minor(version: str) -> str:
    try:
        release = Version(version).release
    except InvalidVersion:
        return ""
    return f"{release[0]}.{release[1]}" if len(release) >= 2 else ""


def _metadata(archive: zipfile.ZipFile, path: Path) -> str:
    names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if len(names) != 1:
        raise BadInput(f"{path}: {len(names)} *.dist-info/METADATA files in it, not one: not a wheel (or a broken "
                       "one); download it again")
    return archive.read(names[0]).decode("utf-8", "replace")


def inspect_wheel(path: Path) -> Inspection:
    """Read ``path`` (a .whl) and say what it was built against; BadInput for a file that is not a readable wheel."""
    try:
        name = parse_wheel_filename(path.name)
    except WheelNameError as exc:
        raise BadInput(f"{path}: {exc}") from None
    result = Inspection(filename=path.name, package=name.name, version=name.version)
    label = name.label
    if label.torch or label.cuda:
        result.evidence.append(f"label +{name.local}: " + ", ".join(
            x for x in (f"CUDA {label.cuda}" if label.cuda else "", f"torch {label.torch_build or label.torch}"
                        if label.torch else "") if x))
    try:
        with zipfile.ZipFile(path) as archive:
            metadata = _metadata(archive, path)
            result.shared_objects = [n for n in archive.namelist() if n.endswith(".so") or ".so." in n]
            so_info = _read_shared_objects(archive, result.shared_objects, path)
    except zipfile.BadZipFile as exc:
        raise BadInput(f"{path}: not a zip archive ({exc}): a truncated download? fetch the wheel again") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    headers = HeaderParser().parsestr(metadata)
    result.metadata_version = (headers.get("Version") or "").strip()
    if result.metadata_version and result.metadata_version != name.version:
        try:
            same = Version(result.metadata_version) == Version(name.version)
        except InvalidVersion:
            same = False
        if not same:
            result.contradictions.append(f"METADATA says version {result.metadata_version}, the file name "
                                         f"{name.version}")
    pin_torch, pin_cuda = "", ""
    for req in linux_requirements(headers):
        pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
        package = canonicalize_name(req.name)
        if package == "torch" and pins:
            pin_torch = pins[0].split("+")[0]
            result.evidence.append(f"Requires-Dist: {str(req).split(';')[0].strip()}")
        elif (package == "cuda-toolkit" or package.startswith("nvidia-cuda-runtime")) and pins and not pin_cuda:
            pin_cuda = ".".join(pins[0].split(".")[:2])
            result.evidence.append(f"Requires-Dist: {str(req).split(';')[0].strip()}")
    linked_major, links_torch, symbols = so_info
    result.links_torch = links_torch
    if linked_major:
        result.evidence.append(f".so links libcudart.so.{linked_major}")
    hint = cxx11_abi_hint(symbols)
    result.cxx11_abi = "" if hint is None else ("TRUE" if hint else "FALSE")
    # torch: the pin is exact; the label may be major.minor only
    result.torch_build = pin_torch or label.torch_build
    result.torch = _minor(pin_torch) if pin_torch else label.torch
    if pin_torch and label.torch and _minor(pin_torch) != label.torch:
        result.contradictions.append(f"the label says torch {label.torch}, Requires-Dist pins torch=={pin_torch}")
    # CUDA: label or metadata give major.minor; the linked runtime gives the major only
    result.cuda = label.cuda or pin_cuda or linked_major
    for what, cuda in (("the label", label.cuda), ("Requires-Dist", pin_cuda)):
        if cuda and linked_major and cuda_major(cuda) != linked_major:
            result.contradictions.append(f"{what} says CUDA {cuda}, its .so files link libcudart.so.{linked_major}")
    if label.cuda and pin_cuda and cuda_major(label.cuda) != cuda_major(pin_cuda):
        result.contradictions.append(f"the label says CUDA {label.cuda}, Requires-Dist CUDA {pin_cuda}")
    if label.torch and result.shared_objects and not links_torch:
        result.contradictions.append(f"the label says torch {label.torch}, but none of its .so files links torch")
    return result


def _read_shared_objects(archive: zipfile.ZipFile, names: list[str], path: Path) -> tuple[str, bool, list[str]]:
    """(CUDA runtime major linked, links torch, undefined symbols) over every ELF .so in the wheel."""
    majors: set[int] = set()
    links_torch = False
    symbols: list[str] = []
    with tempfile.TemporaryDirectory(prefix="labwright-wheel-") as tmp:
        for index, member in enumerate(names):
            info = archive.getinfo(member)
            if info.file_size > MAX_SO_BYTES:
                continue
            target = Path(tmp) / f"{index}.so"
            with archive.open(info) as source, open(target, "wb") as out:
                head = source.read(4)
                if head != b"\x7fELF":
                    continue
                out.write(head)
                while chunk := source.read(1024 * 1024):
                    out.write(chunk)
            try:
                dynamic = read_dynamic(target)
            except BrokenElf as exc:
                raise BadInput(f"{path}: {member}: {str(exc).split(': ', 1)[-1]}") from None
            finally:
                target.unlink()
            major = dynamic.cuda_runtime_major
            if major is not None:
                majors.add(major)
            links_torch = links_torch or dynamic.needs_torch
            symbols += dynamic.undefined + dynamic.exported
    if len(majors) > 1:
        raise BadInput(f"{path}: its .so files link CUDA runtimes of several majors ({sorted(majors)}): a broken "
                       "build; use another wheel")
    return (str(next(iter(majors))) if majors else ""), links_torch, symbols
