"""The NVIDIA driver as a guest and a host show it, read by pure parsers, and the driver-match rule.

- the host kernel module's version: ``/proc/driver/nvidia/version`` (inside an LXC/LXD container that file is the
  HOST's, procfs being the host kernel's);
- the userspace's version: the file names of ``libcuda.so.<ver>`` and ``libnvidia-ml.so.<ver>``
  (``userspace_listing`` lists them wherever they are installed);
- nvidia-smi's banner (``Driver Version: ...``, "version mismatch").

``labwright.facts.nvidia`` runs the same parsing through pyinfra on remote hosts and inside containers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from labwright.shell import quote

#: Fixed by NVIDIA for the GPU nodes and nvidiactl (/proc/devices calls it "nvidia-frontend" or "nvidia").
NVIDIA_MAJOR = 195
#: Userspace libraries whose file name carries the exact driver version (libcuda.so.550.54.14).
VERSIONED_LIBRARIES = ("libcuda.so", "libnvidia-ml.so")
#: Where distributions and the .run installer put them, and where container runtimes mount the host's (NVIDIA's CUDA
#: images and Kubernetes' device plugin: /usr/local/nvidia/lib64, named in ld.so.conf). Seen on the lent H200
#: (2026-11-27): libcuda.so.580.159.04 in /usr/local/nvidia/lib64 and in no distribution directory, so a check that
#: read only those called a working GPU machine "no userspace".
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib", "/usr/lib/aarch64-linux-gnu",
                "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib")
#: The directories the dynamic loader's cache has libcuda/libnvidia-ml in (``ldconfig -p``: "libcuda.so.1 (libc6,
#: x86-64) => /opt/nvidia/lib/libcuda.so.1"): what a CUDA program really loads, wherever an installer put it.
_LOADER_DIRS = ("ldconfig -p 2>/dev/null | sed -nE 's#^.* => (/.*)/lib(cuda|nvidia-ml)[.]so.*#\\1#p' | sort -u")

_VERSION = r"([0-9]+\.[0-9]+(?:\.[0-9]+)?)"
_DRIVER_LINE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+" + _VERSION)
_LIBRARY = re.compile(r"^(lib(?:cuda|nvidia-ml)\.so)\." + _VERSION + r"$")
_SMI_VERSION = re.compile(r"Driver Version:\s*" + _VERSION)


def userspace_listing(root: str = "/") -> str:
    """A shell command listing the file names in every directory the NVIDIA userspace may be in (LIBRARY_DIRS, and
    on a real system the loader's own directories for it); ``userspace_versions`` reads the versions from them. Below
    a fake ``root`` (tests) only LIBRARY_DIRS are read."""
    base = root.rstrip("/")
    dirs = " ".join(quote(base + d) for d in LIBRARY_DIRS)
    listing = f"for d in {dirs}; do ls -1 \"$d\" 2>/dev/null; done"
    if base:
        return f"{{ {listing}; }}"
    return f"{{ {listing}; {_LOADER_DIRS} | while IFS= read -r d; do ls -1 \"$d\" 2>/dev/null; done; }}"


# --- pure parsers ----------------------------------------------------------------------------
def parse_driver_version(text: str) -> str | None:
    """The kernel module version from ``/proc/driver/nvidia/version``, e.g.
    ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 ...`` -> ``550.54.14``
    (also the open module's ``... Open Kernel Module for x86_64  570.133.07  Release Build ...``)."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            match = _DRIVER_LINE.search(line)
            if match:
                return match.group(1)
    return None


def userspace_versions(file_names: Iterable[str]) -> dict[str, str]:
    """{library: version} from library file names (``libcuda.so.550.54.14``); unversioned links ignored."""
    found: dict[str, str] = {}
    for name in file_names:
        match = _LIBRARY.match(os.path.basename(name.strip()))
        if match:
            found.setdefault(match.group(1), match.group(2))
    return found


def parse_nvidia_smi(text: str) -> tuple[str | None, bool]:
    """(driver version, API mismatch reported) from ``nvidia-smi`` output."""
    match = _SMI_VERSION.search(text)
    return (match.group(1) if match else None), "version mismatch" in text.lower()


@dataclass(frozen=True)
class DriverMatch:
    """Host kernel module vs container userspace. ``ok`` only on an exact version match."""

    status: str  # match | mismatch | missing-userspace | no-host-driver
    host_version: str | None
    userspace: dict[str, str] = field(default_factory=dict)
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "match"


def check_driver_match(host_version: str | None, userspace: dict[str, str], smi_output: str = "") -> DriverMatch:
    """The rule: every versioned userspace library equals the host module version EXACTLY. A same-major
    match is not enough (570.148.06 vs .08 gives NVRM "API mismatch"), and nvidia-smi saying
    "version mismatch" is a mismatch whatever the files say."""
    fix = f"install NVIDIA-Linux-x86_64-{host_version}.run --no-kernel-module (or packages pinned to {host_version})"
    if host_version is None:
        return DriverMatch("no-host-driver", None, dict(userspace),
                           "no NVIDIA kernel module (/proc/driver/nvidia/version missing); install the host driver")
    if not userspace:
        return DriverMatch("missing-userspace", host_version, {},
                           f"no NVIDIA userspace libraries (libcuda/libnvidia-ml) found; {fix}")
    wrong = {lib: ver for lib, ver in userspace.items() if ver != host_version}
    _, smi_mismatch = parse_nvidia_smi(smi_output)
    if wrong or smi_mismatch:
        found = ", ".join(f"{lib} {ver}" for lib, ver in sorted((wrong or userspace).items()))
        return DriverMatch("mismatch", host_version, dict(userspace),
                           f"driver mismatch: host module {host_version}, container has {found}; {fix}")
    return DriverMatch("match", host_version, dict(userspace), f"userspace matches host driver {host_version}")
