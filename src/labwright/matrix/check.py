"""`labwright matrix check`: was every pinned wheel built for this torch / CUDA / Python?

A pin is a wheel URL, a wheel file name, `name @ URL`, or `name==version+label`; what it was built against comes
from its file name or local label (wheelname.py), refined by the matrix row when the file is known. Requirements
that pin nothing (`fla-core>=0.5`) are not pins and are skipped; a compiled package pinned without a label
(`flash-attn==2.8.3`) is reported as unknown, since pip would build it from source against whatever torch it finds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from labwright import textio
from labwright.errors import BadInput
from labwright.matrix import inputs
from labwright.matrix.model import Matrix, Wheel
from labwright.matrix.wheelname import (
    BuildLabel,
    cuda_major,
    parse_build_label,
    parse_wheel_filename,
    platform_matches,
    python_matches,
    python_tag_for,
)

OK, BROKEN, UNKNOWN = "ok", "broken", "unknown"


@dataclass
class PinVerdict:
    origin: str  # `requirements.txt:3` or `argument 2`
    text: str
    name: str  # as the wheel spells it: flash_attn
    version: str
    status: str  # ok / broken / unknown
    problems: list[str] = field(default_factory=list)
    hint: str = ""

    def line(self) -> str:
        what = f"{self.name} {self.version}".strip()
        body = "; ".join(self.problems) if self.problems else "built for this stack"
        return f"{what}: {body}" + (f" ({self.hint})" if self.hint else "")


@dataclass(frozen=True)
class Target:
    torch: Version
    cuda: str | None
    python: str | None
    platform: str = "linux_x86_64"

    @property
    def torch_mm(self) -> str:
        return f"{self.torch.release[0]}.{self.torch.release[1]}"


def read_requirement_lines(path: Path, seen: set[Path] | None = None) -> list[tuple[str, str]]:
    """(origin, text) for each requirement in a requirements file; follows `-r`, drops comments and options."""
    seen = seen or set()
    if path.resolve() in seen:
        return []
    seen.add(path.resolve())
    raw = textio.read_text(path, "a requirements file (-r)")
    lines: list[tuple[str, str]] = []
    for number, line in enumerate(raw.replace("\\\n", "").splitlines(), 1):
        text = line.split(" #", 1)[0].strip()
        if not text or text.startswith("#"):
            continue
        if text.startswith(("-r ", "--requirement ")):
            lines += read_requirement_lines(path.parent / text.split(None, 1)[1], seen)
        elif not text.startswith("-"):
            lines.append((f"{path}:{number}", text))
    return lines


def _marker_applies(marker: Marker | None, target: Target) -> bool:
    if marker is None or target.python is None:
        return True  # without --python the target is not fully known: check every line
    env = {"python_version": target.python.rstrip("t"), "python_full_version": target.python.rstrip("t") + ".0",
           "platform_system": "Windows" if target.platform.startswith("win") else "Linux",
           "sys_platform": "win32" if target.platform.startswith("win") else "linux",
           "platform_machine": "AMD64" if target.platform.startswith("win") else target.platform.split("_", 1)[1],
           "os_name": "nt" if target.platform.startswith("win") else "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    return marker.evaluate(env)


def _label_problems(package: str, version: str, label: BuildLabel, target: Target, known: list[Wheel]) -> list[str]:
    problems = []
    if package == "torch":
        if Version(version.split("+", 1)[0]) != Version(target.torch.public):
            problems.append(f"this is torch {version}, the stack's torch is {target.torch}")
        if target.cuda and label.cuda and label.cuda != target.cuda:
            problems.append(f"a CUDA {label.cuda} build, the stack's CUDA is {target.cuda}")
        return problems
    torch_build = label.torch_build or next((w.torch_build for w in known if w.torch_build), "")
    requires = next((w.requires_torch for w in known if w.requires_torch), "")
    if label.torch and label.torch != target.torch_mm:
        problems.append(f"built for torch {torch_build or label.torch}, not torch {target.torch}")
    elif requires.startswith("==") and Version(requires[2:]) != Version(target.torch.public):
        problems.append(f"built for torch {torch_build} and its metadata pins torch{requires}, "
                        f"not torch {target.torch}")
    if target.cuda and label.cuda and cuda_major(label.cuda) != cuda_major(target.cuda):
        problems.append(f"built for CUDA {label.cuda}, the stack's torch uses CUDA {target.cuda}")
    return problems


def _replacement(package: str, version: str, target: Target, matrix: Matrix, like: Wheel | None = None) -> str:
    """The same release built for the target, to name in the hint; closest to the broken pin's own tags."""
    public = version.split("+", 1)[0]
    want_cuda = target.cuda or (like.cuda if like else "")
    fits = [w for w in matrix.wheels
            if w.package == package and w.public_version == public and w.torch == target.torch_mm
            and (not want_cuda or not w.cuda or cuda_major(w.cuda) == cuda_major(want_cuda))
            and (not target.python or python_matches(w.python, w.abi, target.python))
            and platform_matches(w.platform, target.platform)
            and (not w.requires_torch.startswith("==")
                 or Version(w.requires_torch[2:]) == Version(target.torch.public))]
    if not fits:
        return f"no {package} {public} wheel for torch {target.torch_mm} in the matrix: see labwright matrix resolve"

    def closeness(w: Wheel) -> tuple:
        same_python = like is not None and w.python == like.python
        same_platform = like is not None and w.platform == like.platform
        return (same_python, w.cuda == want_cuda, same_platform, w.cuda, w.release)

    return f"use {max(fits, key=closeness).filename}"


def check_pin(origin: str, text: str, target: Target, matrix: Matrix) -> PinVerdict | None:
    """Verdict for one requirement, or None when it pins nothing (or its marker excludes the target)."""
    url = ""
    if text.endswith(".whl") and " @ " not in text:
        url = text
    else:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            first = str(exc).splitlines()[0]
            raise BadInput(f"{origin}: {text!r} is not a requirement ({first}): write name==version or a wheel URL") \
                from None
        if not _marker_applies(req.marker, target):
            return None
        url = req.url or ""
    if url:
        if not url.split("#", 1)[0].endswith(".whl"):
            return None  # a VCS or sdist URL: built locally, against whatever torch is installed
        wheel_name = parse_wheel_filename(url.split("#", 1)[0])
        known = matrix.find_wheel(wheel_name.filename)
        verdict = PinVerdict(origin, text, wheel_name.distribution, wheel_name.version, OK)
        verdict.problems = _label_problems(wheel_name.name, wheel_name.version, wheel_name.label, target, known)
        if target.python and not python_matches(wheel_name.python_tag, wheel_name.abi_tag, target.python):
            verdict.problems.append(f"built for {wheel_name.python_tag}, not {python_tag_for(target.python)}")
        if not platform_matches(wheel_name.platform_tag, target.platform):
            verdict.problems.append(f"built for {wheel_name.platform_tag}, not {target.platform}")
        package = wheel_name.name
        like: Wheel | None = Wheel(package, wheel_name.version, wheel_name.python_tag, wheel_name.abi_tag,
                     wheel_name.platform_tag, wheel_name.label.torch, wheel_name.label.cuda, "", url)
    else:
        pinned = [s for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
        if not pinned:
            return None
        version = pinned[0].version
        try:
            Version(version)
        except InvalidVersion:
            raise BadInput(f"{origin}: {version!r} in {text!r} is not a version: write name==1.2.3+label") from None
        package = canonicalize_name(req.name)
        verdict = PinVerdict(origin, text, req.name, version, OK)
        label = parse_build_label(version.split("+", 1)[1]) if "+" in version else BuildLabel()
        component = matrix.component_of(package)
        if package != "torch" and not label.torch and not (component and component.pure_python):
            verdict.status = UNKNOWN
            verdict.problems.append("no +cuXXXtorchX.Y label, so nothing says which torch it was built for")
            verdict.hint = "pin a wheel URL or a labelled version"
            return verdict
        known = [w for w in matrix.wheels if w.package == package and w.version == version]
        like = known[0] if known else None
        verdict.problems = _label_problems(package, version, label, target, known)
    if verdict.problems:
        verdict.status = BROKEN
        if package != "torch":
            verdict.hint = _replacement(package, verdict.version, target, matrix, like)
    return verdict


def check_requirements(lines: Iterable[tuple[str, str]], torch: str, matrix: Matrix, cuda: str | None = None,
                       python: str | None = None, platform: str = "linux_x86_64") -> list[PinVerdict]:
    """A verdict per pinned wheel. With no `cuda`, a torch pin labelled +cuXYZ among the lines supplies it."""
    target_torch = inputs.parse_torch(torch)
    lines = list(lines)
    cuda_value = inputs.parse_cuda(cuda) if cuda else None
    if cuda_value is None and target_torch.local:
        cuda_value = inputs.parse_cuda(target_torch.local)
    if cuda_value is None:
        cuda_value = _cuda_from_torch_pin(lines)
    target = Target(target_torch, cuda_value, inputs.parse_python(python) if python else None,
                    inputs.parse_platform(platform))
    verdicts = []
    for origin, text in lines:
        verdict = check_pin(origin, text, target, matrix)
        if verdict is not None:
            verdicts.append(verdict)
    return verdicts


def _cuda_from_torch_pin(lines: list[tuple[str, str]]) -> str | None:
    for _, text in lines:
        try:
            name = parse_wheel_filename(text.split(" @ ", 1)[-1].split(";", 1)[0].strip()) \
                if ".whl" in text else None
        except BadInput:
            name = None
        if name is not None and name.name == "torch" and name.label.cuda:
            return name.label.cuda
    return None
