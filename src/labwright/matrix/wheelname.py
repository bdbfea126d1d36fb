"""Wheel file names (PEP 427) and the local version labels that say what a wheel was built against.

The filename is the only metadata a wheel URL carries before download, and for torch extensions the local label
(`+cu130torch2.11`, `+cu12torch2.8cxx11abiFALSE`, `+cu128.torch2.9.0`) is the only record of the torch and CUDA
that the compiled .so links against. Every upstream spells it differently, so the label grammar here is lenient
about separators and case but strict about what each token means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name
from packaging.utils import parse_wheel_filename as _packaging_parse
from packaging.version import InvalidVersion, Version

from labwright.errors import BadInput
from labwright.textio import ascii_digits


class WheelNameError(BadInput):
    """A string that is not a PEP 427 wheel file name."""


@dataclass(frozen=True)
class BuildLabel:
    """What a local version label says about the build. Empty strings mean the label does not say."""

    cuda: str = ""  # "12.8", "13.0", or a major only ("12") when the label is `cu12`
    rocm: str = ""  # "6.4", "6.2.4"
    torch: str = ""  # torch major.minor the build links against: "2.11"
    torch_build: str = ""  # the exact torch when the label spells it: "2.11.0"
    cxx11_abi: str = ""  # "TRUE" / "FALSE" as labelled (labels have been wrong in the wild)
    ngc: str = ""  # an NVIDIA NGC container release ("25.11") where the label names one instead of torch
    cpu: bool = False
    rest: str = ""  # anything after the known tokens (`gite2743ab`, `glibc228`), kept verbatim


class LocalVersion:
    """The public part and the local label of `version`, kept as spelled (packaging would lower-case the label)."""

    version: str

    @property
    def public_version(self) -> str:
        return self.version.split("+", 1)[0]

    @property
    def local(self) -> str:
        return self.version.split("+", 1)[1] if "+" in self.version else ""


@dataclass(frozen=True)
class WheelName(LocalVersion):
    """A parsed wheel file name; `version` keeps the label's spelling (packaging would lower-case it)."""

    filename: str
    distribution: str  # as spelled in the file name: `flash_attn`
    version: str  # `2.8.3+cu12torch2.8cxx11abiFALSE`
    build_tag: str
    python_tags: tuple[str, ...]
    abi_tags: tuple[str, ...]
    platform_tags: tuple[str, ...]

    @property
    def name(self) -> str:
        """The canonical project name (PEP 503): `flash-attn`."""
        return canonicalize_name(self.distribution)

    @property
    def label(self) -> BuildLabel:
        return parse_build_label(self.local)

    @property
    def python_tag(self) -> str:
        return ".".join(self.python_tags)

    @property
    def abi_tag(self) -> str:
        return ".".join(self.abi_tags)

    @property
    def platform_tag(self) -> str:
        return ".".join(self.platform_tags)


def filename_from_url(url: str) -> str:
    """The file name at the end of a URL or path, with %2B and friends decoded (`torch-2.9.0%2Bcu128-...`)."""
    path = urlsplit(url).path if "://" in url else url
    return unquote(path.rstrip("/").rsplit("/", 1)[-1])


def parse_wheel_filename(filename: str) -> WheelName:
    """Parse `{dist}-{version}(-{build})?-{python}-{abi}-{platform}.whl`, a URL ending in one, or a path.

    packaging validates the name and version (PEP 427/440); the raw pieces are kept so that labels keep their case.
    """
    name = filename_from_url(filename.strip())
    try:
        _packaging_parse(name)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise WheelNameError(f"{name!r} is not a wheel file name ({exc}): "
                             "expected NAME-VERSION-PYTHON-ABI-PLATFORM.whl") from exc
    parts = name[: -len(".whl")].split("-")
    build = parts[2] if len(parts) == 6 else ""
    return WheelName(
        filename=name,
        distribution=parts[0],
        version=parts[1],
        build_tag=build,
        python_tags=tuple(parts[-3].split(".")),
        abi_tags=tuple(parts[-2].split(".")),
        platform_tags=tuple(parts[-1].split(".")),
    )


# One pass over the (lower-cased) label: accelerator, then torch, then the ABI flag; separators between tokens are
# optional because upstreams write `cu128torch2.9`, `cu128.torch2.9.0` and `cu128_torch2.9` for the same thing.
_LABEL = re.compile(
    r"""(?a)^(?:(?P<cpu>cpu)|cu(?P<cu>\d+)|rocm(?P<rocm>\d+(?:\.\d+)*))?
        [._]?(?:torch(?P<torch>\d+(?:\.\d+){1,2}))?
        [._]?(?:cxx11abi(?P<abi>true|false))?
        [._]?(?P<rest>.*)$""",
    re.VERBOSE,
)


def cuda_from_label(digits: str) -> str:
    """`128` -> `12.8`, `130` -> `13.0`, `12` -> `12` (major only, as Dao-AILab labels), `92` -> `9.2`."""
    if not ascii_digits(digits):
        raise ValueError(f"cu{digits}: not a CUDA label")
    if digits[0] == "1":
        major, minor = digits[:2], digits[2:]
    else:
        major, minor = digits[:1], digits[1:]
    return f"{int(major)}.{int(minor)}" if minor else str(int(major))


def cuda_to_label(cuda: str) -> str:
    """`12.8` -> `cu128`, `13.0` -> `cu130`, `12` -> `cu12`: the index and label spelling."""
    return "cu" + cuda.replace(".", "")


def parse_build_label(local: str) -> BuildLabel:
    """Read a local version label. Unknown labels come back with only `rest` set, never an exception."""
    match = _LABEL.match(local.lower())
    if not match or not local:
        return BuildLabel(rest=local)
    torch = match["torch"] or ""
    torch_minor, torch_build, ngc = "", "", ""
    if torch:
        pieces = torch.split(".")
        if int(pieces[0]) >= 20:
            # causal-conv1d names NVIDIA container releases in the torch slot: `cu13torch25.11` is NGC 25.11.
            ngc = torch
        else:
            torch_minor = ".".join(pieces[:2])
            torch_build = torch if len(pieces) == 3 else ""
    abi = (match["abi"] or "").upper()
    # keep the unparsed tail in the label's own case
    rest = local[len(local) - len(match["rest"]):] if match["rest"] else ""
    return BuildLabel(
        cuda=cuda_from_label(match["cu"]) if match["cu"] else "",
        rocm=match["rocm"] or "",
        torch=torch_minor,
        torch_build=torch_build,
        cxx11_abi=abi,
        ngc=ngc,
        cpu=bool(match["cpu"]),
        rest=rest,
    )


def torch_minor(version: str) -> str:
    """`2.11.0+cu130` -> `2.11`."""
    release = Version(version).release
    return f"{release[0]}.{release[1] if len(release) > 1 else 0}"


def cuda_major(cuda: str) -> str:
    return cuda.split(".", 1)[0]


def python_tag_for(python: str) -> str:
    """`3.12` -> `cp312`, `3.14t` -> `cp314t` (the free-threaded ABI)."""
    threaded = python.endswith("t")
    major, minor = python.rstrip("t").split(".")[:2]
    return f"cp{major}{minor}" + ("t" if threaded else "")


def python_matches(python_tag: str, abi_tag: str, python: str) -> bool:
    """Whether a wheel with these tags installs on CPython `python` ("3.12", or "3.14t" for free-threaded)."""
    wanted = python_tag_for(python)
    threaded = wanted.endswith("t")
    interpreter = wanted.rstrip("t")
    wanted_minor = int(interpreter[3:])
    for py in python_tag.split("."):
        for abi in abi_tag.split("."):
            if abi == "abi3":
                # the stable ABI: any CPython at or above the tag's version, but not the free-threaded build
                if py.startswith("cp3") and not threaded and int(py[3:]) <= wanted_minor:
                    return True
            elif abi == "none":
                if py in ("py3", f"py3{wanted_minor}", interpreter):
                    return True
            elif py == interpreter and abi == wanted:
                return True
    return False


def platform_family(platform_tag: str) -> set[str]:
    """`manylinux_2_24_x86_64.manylinux_2_28_x86_64` -> {"linux_x86_64"}; `win_amd64` -> itself; `any` -> {"any"}.

    The glibc floor of a manylinux tag is not checked: every supported host (Debian 12, PVE 8) is far above 2.28.
    """
    families = set()
    for tag in platform_tag.split("."):
        if tag == "any" or tag.startswith("win"):
            families.add(tag)
            continue
        for arch in ("x86_64", "aarch64"):
            if tag.endswith(arch) and (tag.startswith("linux") or tag.startswith("manylinux")):
                families.add(f"linux_{arch}")
        if tag.startswith("macosx"):
            families.add("macosx")
    return families or {platform_tag}


def platform_matches(platform_tag: str, platform: str) -> bool:
    families = platform_family(platform_tag)
    return "any" in families or platform in families
