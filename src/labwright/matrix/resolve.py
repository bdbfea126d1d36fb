"""`resolve_stack`: the newest wheel of each component that fits a torch + CUDA + Python (+ driver), with reasons.

Pure logic over the Matrix: no host is touched. What "fits" means, and why:
- a compiled extension links torch's C++ symbols by mangled name, and those change between torch minors, so its
  label's torch major.minor must equal the torch's (exllamav3 >= 0.0.32 even pins the exact torch in Requires-Dist);
- its CUDA major must equal torch's: the CUDA runtime soname is per major (libcudart.so.12 vs .13), while a newer
  minor of the same major is fine (tabbyAPI pairs exllamav3 +cu132 with torch +cu130);
- its Python and platform tags must match;
- the driver must run the CUDA of every chosen binary (cuda.toml floors);
- given the GPUs' compute capabilities, every chosen binary's CUDA must carry kernels for each of them
  (labwright.gpu.arch: a CUDA 12.6 build has none for a Blackwell RTX 50, sm_120, which needs CUDA >= 12.8).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from labwright.errors import BadInput
from labwright.gpu import arch
from labwright.matrix import inputs
from labwright.matrix.load import load_matrix
from labwright.matrix.model import Component, Matrix, Wheel
from labwright.matrix.wheelname import cuda_major, cuda_to_label, platform_matches, python_matches, python_tag_for
from labwright.textio import ascii_digits


@dataclass(frozen=True)
class StackRequest:
    torch: str
    cuda: str | None = None
    python: str = "3.12"
    engine: str = "tabbyapi"
    driver: str | None = None
    platform: str = "linux_x86_64"
    pins: tuple[str, ...] = ()
    only: tuple[str, ...] = ()  # resolve only these components (default: all of the engine's)
    compute_caps: tuple[str, ...] = ()  # the GPUs it must run on ("12.0"); empty: not checked


@dataclass
class Chosen:
    component: str
    wheel: Wheel
    reason: str
    alternatives: list[Wheel] = field(default_factory=list)  # same version, other CUDA builds that also fit


@dataclass
class Absent:
    component: str
    name: str
    reason: str


@dataclass
class Resolution:
    request: StackRequest
    wheels: list[Chosen] = field(default_factory=list)
    absent: list[Absent] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def chosen(self, component: str) -> list[Chosen]:
        return [c for c in self.wheels if c.component == component]

    def to_json(self) -> dict:
        out = {
            "ok": self.ok,
            "wheels": [{"name": c.wheel.package, "version": c.wheel.version, "url": c.wheel.url,
                        "sha256": c.wheel.sha256 or None, "reason": c.reason} for c in self.wheels],
            "absent": [{"name": a.name, "reason": a.reason} for a in self.absent],
            "errors": list(self.errors),
        }
        if self.request.compute_caps:  # only when asked: without GPUs the document is as it always was
            out["compute_caps"] = [arch.parse_capability(c) for c in self.request.compute_caps]
        return out


def _release_key(release: str) -> Version:
    digits = re.sub(r"[^0-9.]", "", release).strip(".")
    return Version(digits) if re.fullmatch(r"(?a)\d+(\.\d+)*", digits) else Version("0")


def _cuda_closeness(wheel_cuda: str, torch_cuda: str) -> int:
    """Prefer the exact CUDA, then an older minor of the same major, then a major-only label, then a newer minor."""
    if not wheel_cuda or wheel_cuda == torch_cuda:
        return 3
    if "." not in wheel_cuda:
        return 1
    return 2 if Version(wheel_cuda) < Version(torch_cuda) else 0


def _preference(wheel: Wheel, torch_cuda: str, torch_abi: str) -> tuple:
    abi = 2 if wheel.cxx11_abi == torch_abi else (1 if not wheel.cxx11_abi else 0)
    single_platform = 0 if "." in wheel.platform else 1
    return (Version(wheel.public_version), _cuda_closeness(wheel.cuda, torch_cuda), abi,
            _release_key(wheel.release), single_platform)


def _listing(values: set[str], limit: int = 6) -> str:
    ordered = sorted(values, key=lambda v: [int(x) if ascii_digits(x) else x for x in re.split(r"[.t]", v) if x])
    shown = ordered[-limit:]
    return ("..., " if len(ordered) > limit else "") + ", ".join(shown)


Stage = tuple[Callable[[Wheel], bool], Callable[[list[Wheel]], str]]


def _minor_key(torch_mm: str) -> tuple[int, ...]:
    return tuple(int(x) for x in torch_mm.split(".") if ascii_digits(x))


def _nearest_torch(display: str, candidates: list[Wheel], torch_mm: str) -> str:
    """`` (prebuilt for torch 2.7 .. 2.11; nearest that works: torch 2.11 with exllamav3 1.4.2)``, plus a line on
    wheels that carry no build (JIT wheels compile at first import), for a refusal that says where to go instead."""
    built = [w for w in candidates if w.torch]
    out = ""
    if built:
        minors = sorted({w.torch for w in built}, key=_minor_key)
        asked = _minor_key(torch_mm)
        below = [m for m in minors if _minor_key(m) < asked]
        nearest = below[-1] if below else minors[0]
        newest = max((w for w in built if w.torch == nearest), key=lambda w: Version(w.public_version))
        span = minors[0] if len(minors) == 1 else f"{minors[0]} .. {minors[-1]}"
        out = (f" (prebuilt for torch {span}; nearest torch with one: {nearest}, {display} "
               f"{newest.public_version})")
    jit = [w for w in candidates if not w.torch and "JIT" in w.note]
    if jit:
        newest_jit = max(jit, key=lambda w: Version(w.public_version))
        out += (f"; {display} {newest_jit.public_version} on {newest_jit.source or 'PyPI'} is a JIT wheel (no "
                "prebuilt extension: it compiles at first import and needs nvcc)")
    return out


def _narrow(candidates: list[Wheel], stages: list[Stage]) -> tuple[list[Wheel], str]:
    """Apply filters in order; when one empties the set, say why using what was left before it."""
    for keep, explain in stages:
        kept = [w for w in candidates if keep(w)]
        if not kept:
            return [], explain(candidates)
        candidates = kept
    return candidates, ""


class _Resolver:
    def __init__(self, matrix: Matrix, request: StackRequest):
        self.m = matrix
        self.req = request
        self.out = Resolution(request=request)
        self.python = inputs.parse_python(request.python)
        self.platform = inputs.parse_platform(request.platform)
        self.driver = inputs.parse_driver(request.driver) if request.driver else None
        self.torch_wanted = inputs.parse_torch(request.torch)
        self.cuda_wanted = inputs.parse_cuda(request.cuda) if request.cuda else None
        if self.torch_wanted.local and not self.cuda_wanted:
            self.cuda_wanted = inputs.parse_cuda(self.torch_wanted.local)
        if request.engine not in matrix.engines:
            raise BadInput(f"--engine {request.engine!r} is unknown: use one of {', '.join(matrix.engines)}")
        self.engine = matrix.engines[request.engine]
        self.pins: dict[str, list[Requirement]] = {}
        for text in request.pins:
            pin = inputs.parse_pin(text)
            if matrix.component_of(canonicalize_name(pin.name)) is None:
                known = sorted(p for c in matrix.components.values() for p in c.packages)
                raise BadInput(f"--pin {text!r}: {pin.name} is not in the matrix: pin one of {', '.join(known)}")
            self.pins.setdefault(canonicalize_name(pin.name), []).append(pin)
        for name in request.only:
            if name not in matrix.components:
                raise BadInput(f"component {name!r} is unknown: use one of {', '.join(matrix.components)}")
        # parsed and looked up now: an unknown or misspelt capability is bad input, not a refused stack
        self.compute_caps = tuple(dict.fromkeys(arch.architecture(c).capability for c in request.compute_caps))

    # -- torch ---------------------------------------------------------------------------------------------
    def torch(self) -> Wheel | None:
        wanted = self.torch_wanted
        wheels = self.m.wheels_of("torch")
        by_release = len(wanted.release) >= 3
        same = [w for w in wheels if (Version(w.public_version) == Version(wanted.public) if by_release
                                      else Version(w.public_version).release[:2] == wanted.release[:2])]
        for pin in self.pins.get("torch", []):
            same = [w for w in same if pin.specifier.contains(w.public_version, prereleases=True)]
        if not same:
            known = {w.public_version for w in wheels}
            self.out.errors.append(f"torch {wanted.public}: no such torch wheel in the matrix "
                                   f"(known: {_listing(known, 8)})")
            return None
        newest = max(Version(w.public_version) for w in same)
        same = [w for w in same if Version(w.public_version) == newest]
        if self.cuda_wanted is None:
            same = self._cuda_by_driver(same)
        name = f"torch {newest}"
        stages: list[Stage] = [
            (lambda w: self.cuda_wanted is None or w.cuda == self.cuda_wanted,
             lambda c: f"{name} has no wheel for CUDA {self.cuda_wanted} "
                       f"(its indexes: {', '.join(sorted({cuda_to_label(w.cuda) for w in c}))})"),
            (lambda w: python_matches(w.python, w.abi, self.python),
             lambda c: f"{name}+{cuda_to_label(c[0].cuda)} has no wheel for Python {self.python} "
                       f"(wheels: {_listing({w.python for w in c}, 8)})"),
            (lambda w: platform_matches(w.platform, self.platform),
             lambda c: f"{name} has no {self.platform} wheel (only {', '.join(sorted({w.platform for w in c}))})"),
        ]
        kept, why = _narrow(same, stages)
        if not kept:
            self.out.errors.append(why)
            return None
        best = max(kept, key=lambda w: (_release_key(w.release), not w.note))
        reason = f"torch {best.version} from the {cuda_to_label(best.cuda)} index for {python_tag_for(self.python)}"
        if best.note:
            reason += f" ({best.note})"
        driver_note = self._driver(best.cuda, "torch")
        if driver_note is None or not self._kernels(best, f"torch {best.version}", same):
            return None
        self.out.wheels.append(Chosen("torch", best, reason + driver_note + self._kernels_note(best)))
        return best

    def _cuda_by_driver(self, wheels: list[Wheel]) -> list[Wheel]:
        """No --cuda: the highest CUDA the driver runs (as uv's --torch-backend=auto), non-experimental first; with
        GPUs given, among the builds with kernels for all of them (a CUDA 13 torch for a Pascal card is no pick)."""
        usable = [w for w in wheels if self.driver is None or self._driver_ok(w.cuda)]
        pool = usable or wheels
        pool = [w for w in pool if self._runs_on_gpus(w.cuda)] or pool
        best = max(pool, key=lambda w: (not w.note, Version(w.cuda)))
        self.cuda_wanted = best.cuda
        return wheels

    # -- driver --------------------------------------------------------------------------------------------
    def _driver_ok(self, cuda: str) -> bool:
        floor = self.m.cuda.get(cuda_major(cuda))
        return self.driver is None or floor is None or inputs.driver_at_least(self.driver, floor.compat_driver)

    def _driver(self, cuda: str, what: str) -> str | None:
        """A note for the reason, or None after recording a refusal (driver too old)."""
        if self.driver is None or not cuda:
            return ""
        shown = ".".join(str(p) for p in self.driver)
        floor = self.m.cuda.get(cuda_major(cuda))
        if floor is None:
            return f"; no driver floor recorded for CUDA {cuda_major(cuda)}.x (cuda.toml)"
        release_min = floor.release_drivers.get(cuda, "")
        if not inputs.driver_at_least(self.driver, floor.compat_driver):
            need = f">= {release_min} (or >= {floor.compat_driver} with minor-version compatibility)" \
                if release_min else f">= {floor.compat_driver} (CUDA {floor.major}.x minor-version compatibility)"
            self.out.errors.append(f"driver {shown} is too old for CUDA {cuda} ({what}): it needs {need}")
            return None
        if release_min and not inputs.driver_at_least(self.driver, release_min):
            return (f"; driver {shown} runs CUDA {cuda} only under minor-version compatibility (>= "
                    f"{floor.compat_driver}; {cuda} itself needs >= {release_min}): no PTX JIT")
        if not release_min:
            return (f"; driver {shown} meets the CUDA {floor.major}.x minor-version compatibility floor "
                    f"{floor.compat_driver} (no minimum recorded for {cuda} itself)")
        return ""

    # -- GPU architecture ----------------------------------------------------------------------------------
    def _runs_on_gpus(self, cuda: str) -> bool:
        return not cuda or all(arch.why_not(cuda, cap) is None for cap in self.compute_caps)

    def _no_kernels(self, wheel: Wheel, what: str, same_release: list[Wheel]) -> str | None:
        """None when ``wheel``'s CUDA has kernels for every given GPU; else the refusal, naming the stacks that
        would run there and the CUDA builds of the same release that do. A CPU wheel (no CUDA) is not judged: it
        runs nothing on the GPU."""
        for cap in self.compute_caps if wheel.cuda else ():
            # the alternatives serve the same engine: a vLLM stack is no answer for tabbyAPI, nor the reverse
            vllm = self.engine.name == "vllm"
            stacks = [(name, stack.cuda) for name, stack in self.m.stacks.items()
                      if self._runs_on_gpus(stack.cuda) and (stack.engine == "vllm") == vllm]
            message = arch.refusal(wheel.cuda, cap, what=what, alternatives=stacks)
            if message is None:
                continue
            builds = sorted({w.cuda for w in same_release if w.cuda and self._runs_on_gpus(w.cuda)}, key=Version)
            if builds:
                labels = [cuda_to_label(c) for c in builds]
                listed = ", ".join(labels[:-1]) + " or " + labels[-1] if len(labels) > 1 else labels[0]
                hint = f" (--cuda {builds[-1]})" if wheel.package == "torch" else ""
                message += f"; or {wheel.package} {wheel.public_version}'s own {listed} build{hint}"
            return message
        return None

    def _kernels(self, wheel: Wheel, what: str, same_release: list[Wheel]) -> bool:
        """True when ``wheel`` runs on every given GPU; else its refusal is recorded."""
        message = self._no_kernels(wheel, what, same_release)
        if message is not None:
            self.out.errors.append(message)
        return message is None

    def _gpu_stage(self, display: str) -> Stage:
        """The last filter of an extension's wheels: builds with kernels for the GPUs (an extension without one
        is absent, with the refusal as its reason; a required one then refuses the stack)."""
        def explain(candidates: list[Wheel]) -> str:
            newest = max(candidates, key=lambda w: (Version(w.public_version), Version(w.cuda or "0")))
            return self._no_kernels(newest, f"{display} {newest.version}", candidates) or ""
        return (lambda w: self._runs_on_gpus(w.cuda), explain)

    def _kernels_note(self, wheel: Wheel) -> str:
        if not self.compute_caps or not wheel.cuda:
            return ""
        shown = ", ".join(arch.architecture(c).sm for c in self.compute_caps)
        return f"; CUDA {wheel.cuda} has kernels for {shown}"

    # -- extensions ----------------------------------------------------------------------------------------
    def component(self, component: Component, torch: Wheel) -> None:
        torch_version = Version(torch.public_version)
        torch_mm = f"{torch_version.release[0]}.{torch_version.release[1]}"
        first_version: str | None = None
        for package in component.packages:
            pins = list(self.pins.get(package, []))
            if first_version is not None:
                pins.append(Requirement(f"{package}=={first_version}"))
            stages = self._stages(component, pins, torch, torch_mm, torch_version)
            kept, why = _narrow([w for w in self.m.wheels if w.package == package], stages)
            if not kept:
                reason = why + (f"; {component.fallback}" if component.fallback else "")
                self.out.absent.append(Absent(component.name, package if len(component.packages) > 1
                                              else component.display, reason))
                return
            best = max(kept, key=lambda w: _preference(w, torch.cuda, torch.cxx11_abi))
            first_version = first_version or best.public_version
            driver_note = self._driver(best.cuda, component.display)
            if driver_note is None:
                return
            alternatives = sorted({w.local: w for w in kept if w.public_version == best.public_version
                                   and w.cuda != best.cuda and w.cuda}.values(), key=lambda w: Version(w.cuda))
            reason = self._why(component, best, torch, torch_mm, pins) + driver_note + self._kernels_note(best)
            self.out.wheels.append(Chosen(component.name, best, reason, alternatives))

    def _stages(self, component: Component, pins: list[Requirement], torch: Wheel, torch_mm: str,
                torch_version: Version) -> list[Stage]:
        display = component.display
        pinned = " ".join(str(p) for p in pins)
        cp = python_tag_for(self.python)
        # Asked once per version, not per wheel: a listing holds thousands of wheels of a few dozen versions, and
        # packaging parses the version on every contains() (25,000 calls, ~0.25 s of `matrix stacks`).
        pinned_ok = functools.cache(lambda version: all(p.specifier.contains(version, prereleases=True) for p in pins))
        return [
            (lambda w: pinned_ok(w.public_version),
             lambda c: f"no {pinned} wheel in the matrix (versions: {_listing({w.public_version for w in c})})"),
            (lambda w: (not w.torch and component.pure_python) or w.torch == torch_mm,
             lambda c: f"no wheel built for torch {torch_mm}" + (
                 f" (built for torch {_listing({w.torch for w in c if w.torch})})" if pins
                 else _nearest_torch(display, c, torch_mm))),
            (lambda w: not w.requires_torch or SpecifierSet(w.requires_torch).contains(torch_version, True),
             lambda c: f"{display} wheels for torch {torch_mm} pin torch{c[0].requires_torch} in their metadata: "
                       f"torch {torch_version} cannot be installed beside them"),
            (lambda w: not w.cuda or cuda_major(w.cuda) == cuda_major(torch.cuda),
             lambda c: f"no wheel for CUDA {cuda_major(torch.cuda)} built for torch {torch_mm} (only CUDA "
                       f"{_listing({w.cuda for w in c})}; the CUDA runtime differs per major)"),
            (lambda w: python_matches(w.python, w.abi, self.python),
             lambda c: f"no {cp} wheel built for torch {torch_mm} + CUDA {cuda_major(torch.cuda)} "
                       f"(only {_listing({w.python for w in c})})"),
            (lambda w: platform_matches(w.platform, self.platform),
             lambda c: f"no {self.platform} wheel for {cp} + torch {torch_mm}"),
            self._gpu_stage(display),
        ]

    def _why(self, component: Component, best: Wheel, torch: Wheel, torch_mm: str, pins: list[Requirement]) -> str:
        cp = python_tag_for(self.python)
        if component.pure_python:
            why = f"newest {best.package} ({cp}): pure Python + Triton, no ABI coupling to torch"
            return why + (f"; needs torch{best.requires_torch}" if best.requires_torch else "")
        why = f"newest {component.display} built for torch {torch_mm} + CUDA {best.cuda} ({cp})"
        if pins:
            why = (f"{component.display} {best.public_version} as pinned ({', '.join(str(p) for p in pins)}), "
                   f"built for torch {torch_mm} + CUDA {best.cuda}")
        why += f"; {best.source} {best.release}".rstrip()
        if best.requires_torch:
            why += f"; its metadata pins torch{best.requires_torch}, which torch {torch.public_version} meets"
        if best.cuda and "." in best.cuda and Version(best.cuda) > Version(torch.cuda):
            why += f"; CUDA {best.cuda} build on torch's CUDA {torch.cuda} runtime (same major)"
        if best.cxx11_abi and torch.cxx11_abi and best.cxx11_abi != torch.cxx11_abi:
            why += (f"; labelled cxx11abi{best.cxx11_abi} but torch uses the C++11 ABI: labels have been wrong, "
                    "run `labwright stack verify` after installing")
        return why

    # -- engine rules --------------------------------------------------------------------------------------
    def engine_rules(self) -> None:
        if not self.engine.requires_python.contains(self.python.rstrip("t"), prereleases=True):
            self.out.errors.append(f"{self.engine.name} needs Python {self.engine.requires_python}; "
                                   f"{self.python} is outside it")
        absent = {a.component: a for a in self.out.absent}
        for name in self.engine.required:
            if name in absent and self._wanted(name):
                self.out.errors.append(f"{self.m.components[name].display}: {absent[name].reason}")
        engine_wheels = self.out.chosen(self.engine.engine_component)
        if not engine_wheels:
            return
        engine = engine_wheels[0].wheel
        for need in self.engine.needs:
            if need.when.contains(engine.public_version, prereleases=True) and need.component in absent:
                self.out.errors.append(f"{self.m.components[need.component].display}: {absent[need.component].reason}"
                                       f"; but {need.reason}")

    def _wanted(self, name: str) -> bool:
        return not self.req.only or name in self.req.only

    def run(self) -> Resolution:
        torch = self.torch()
        if torch is not None:
            for name in self.engine.components:
                if name != "torch" and self._wanted(name):
                    self.component(self.m.components[name], torch)
        self.engine_rules()
        return self.out


def resolve_stack(request: StackRequest, matrix: Matrix | None = None) -> Resolution:
    """Resolve `request` against `matrix` (default: the packaged matrix). Raises BadInput for unparsable input;
    an impossible stack is not an exception but a Resolution with errors (ok == False)."""
    return _Resolver(matrix or load_matrix(), request).run()
