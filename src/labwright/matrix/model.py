"""The wheels matrix as plain data: wheels, CUDA driver floors, components, engines and named stacks.

Everything here is read from wheels_matrix/*.toml (see load.py); nothing here decides policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from labwright.matrix.wheelname import LocalVersion, filename_from_url

# The fields a wheel row carries in TOML, in the order refresh writes them.
WHEEL_FIELDS = (
    "package", "version", "python", "abi", "platform", "torch", "torch_build", "cuda", "cxx11_abi",
    "url", "sha256", "source", "release", "requires_torch", "note", "seen",
)


@dataclass(frozen=True)
class Wheel(LocalVersion):
    """One downloadable wheel and what it was built against (empty torch/cuda: no coupling, e.g. pure Python)."""

    package: str  # canonical project name: "flash-attn"
    version: str  # with its local label as published: "2.8.3+cu130torch2.11"
    python: str  # python tag(s): "cp312", "py3", "cp39"
    abi: str  # abi tag(s): "cp312", "cp314t", "abi3", "none"
    platform: str  # platform tag(s): "linux_x86_64", "manylinux_2_24_x86_64.manylinux_2_28_x86_64"
    torch: str  # torch major.minor the binary links against: "2.11"
    cuda: str  # CUDA it was compiled with: "13.0", or a major only ("12") when the label says no more
    cxx11_abi: str  # "TRUE" / "FALSE" as labelled, "" when not labelled
    url: str
    sha256: str = ""
    source: str = ""  # who publishes it: "mjun0812/flash-attention-prebuild-wheels"
    release: str = ""  # the release/tag it was published under: "v0.9.4"
    torch_build: str = ""  # the exact torch it was built with, when known: "2.11.0"
    requires_torch: str = ""  # its Requires-Dist on torch, when that matters: "==2.11.0", ">=2.7.0"
    note: str = ""
    seen: str = ""  # the day a registry refresh first saw it ("2026-11-24"); empty for listing-made rows
    # The matrix file the row was read from (not a TOML field): named when the row is refused for want of a sha256.
    origin: str = field(default="", compare=False, repr=False)

    @property
    def filename(self) -> str:
        return filename_from_url(self.url)

    @property
    def parsed_version(self) -> Version:
        return Version(self.version)

    def to_row(self) -> dict[str, str]:
        """The TOML row: fixed order, optional fields only when set."""
        always = {"package", "version", "python", "abi", "platform", "torch", "cuda", "cxx11_abi", "url", "source"}
        return {k: getattr(self, k) for k in WHEEL_FIELDS if k in always or getattr(self, k)}


@dataclass(frozen=True)
class CudaFloor:
    """Linux driver minimums for one CUDA major and its releases (facts file; see cuda.toml)."""

    major: str
    compat_driver: str  # the floor under CUDA minor-version compatibility
    release_drivers: dict[str, str] = field(default_factory=dict)  # "12.8" -> "570.26": the release's own minimum


@dataclass(frozen=True)
class Component:
    """A logical part of an engine stack (flash_attn), made of one or more packages (fla: two)."""

    name: str
    display: str
    packages: tuple[str, ...]
    pure_python: bool = False
    requires_torch: str = ""  # applies to every wheel of the component (FLA: ">=2.7.0")
    pins_build_torch_since: str = ""  # versions at/after this pin torch==<build torch> in Requires-Dist
    cxx11_abi_since: str = ""  # torch only: wheels at/after this minor use the C++11 ABI
    fallback: str = ""  # what the engine does without it, and what that costs


@dataclass(frozen=True)
class EngineNeed:
    """A component an engine version cannot run without (exllamav3 0.0.30-0.0.43 import flash_attn)."""

    component: str
    when: SpecifierSet  # engine versions the need applies to
    reason: str


@dataclass(frozen=True)
class Engine:
    name: str
    components: tuple[str, ...]  # resolved, in this order
    required: tuple[str, ...]  # a stack without one of these is refused
    requires_python: SpecifierSet
    engine_component: str  # the component whose version the needs are keyed on ("exllamav3")
    needs: tuple[EngineNeed, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class SeedDispute:
    """A cell of a recorded stack that the matrix contradicts, and why (kept so a reader sees both)."""

    component: str
    seed: str
    reason: str


@dataclass(frozen=True)
class Stack:
    """A named stack: what to resolve, and for recorded ones (field note 001's A-D) the table row as published."""

    name: str
    description: str
    torch: str
    cuda: str
    python: str
    engine: str
    pins: tuple[str, ...] = ()
    only: tuple[str, ...] = ()  # resolve only these components (tabbyAPI's extras install exactly these)
    source: str = ""
    seed: dict[str, str] = field(default_factory=dict)  # component -> cell text, verbatim
    disputed: tuple[SeedDispute, ...] = ()
    upstream_urls: tuple[str, ...] = ()  # the exact URLs the upstream pins, for comparison


@dataclass
class Matrix:
    wheels: list[Wheel]
    cuda: dict[str, CudaFloor]
    components: dict[str, Component]
    engines: dict[str, Engine]
    stacks: dict[str, Stack]
    root: str = ""

    def wheels_of(self, component: str) -> list[Wheel]:
        packages = set(self.components[component].packages)
        return [w for w in self.wheels if w.package in packages]

    def component_of(self, package: str) -> Component | None:
        for component in self.components.values():
            if package in component.packages:
                return component
        return None

    def find_wheel(self, filename: str) -> list[Wheel]:
        """Every row with this file name (the same file is often published under several releases)."""
        return [w for w in self.wheels if w.filename == filename]
