"""The options labwright passes to NVIDIA's installer on the host, each with the first installer version that knows
it (pure): the command for a driver holds only options that driver's installer knows, and a version that cannot do
the host install is refused in one line before anything changes.

An option the installer does not know ends its run at once, before it reads or changes anything (no log either):
its option parser prints ``./nvidia-installer: unrecognized option: "--X"`` (the name without its ``=value``;
common-utils/nvgetopt.c L246 in 535.216.01 and 590.48.01, L192 in 302.17), then ``ERROR: Invalid commandline,
please run `./nvidia-installer --help` for usage information.`` and exits 1 (nvidia-installer.c parse_commandline:
535.216.01 L575-578, 590.48.01 L635-639). An upgrade to a 535 driver with 545's
``--allow-installation-with-running-driver`` failed exactly so.

``OPTIONS`` (NVIDIA/nvidia-installer, its tags compared): the first tag whose option table has the option
(option_table.h; before that file, nvidia-installer.c's long options), and what labwright does for an older one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from labwright.textio import ascii_digits


@dataclass(frozen=True)
class InstallerOption:
    """``name`` as passed (``--kernel-name``; a value follows ``=``); ``since`` the first nvidia-installer tag that
    knows it; ``source`` where (file and lines at that tag, and the last tag without it); ``before`` what labwright
    does for an older installer."""

    name: str
    since: str
    source: str
    before: str


#: Every option labwright passes to nvidia-installer on the host, in the command's order.
OPTIONS: tuple[InstallerOption, ...] = (
    InstallerOption("--silent", "1.0-6106", "1.0-6106 nvidia-installer.c L473 (the oldest tag); 590.48.01 "
                    "option_table.h L185", "never older"),
    InstallerOption("--dkms", "304.22", "304.22 (bd091a2) option_table.h L524; 302.17 (3f8fa13) has none",
                    "refused: the upgrade builds the module through DKMS for the kernel the node boots next and "
                    "checks DKMS's tree"),
    InstallerOption("--kernel-name", "1.0-6106", "1.0-6106 nvidia-installer.c L472; 590.48.01 option_table.h L416",
                    "never older"),
    InstallerOption("--allow-installation-with-running-driver", "545.23.06",
                    "545.23.06 (251ec51) option_table.h L719-723, kernel.c L1683-1720; 535.216.01 (f7ffe28), the "
                    "newest 535 tag, has none",
                    "left out; with a module loaded refused (see MODULE_LOADED)"),
    InstallerOption("--log-file-name", "1.0-6106", "1.0-6106 nvidia-installer.c L489; 590.48.01 option_table.h L380",
                    "never older"),
)
BY_NAME = {option.name: option for option in OPTIONS}

#: Why an installer before 545.23.06 cannot install while a module is loaded, and what else there is (535.216.01 =
#: f7ffe28): check_for_unloaded_kernel_module tries rmmod on each loaded NVIDIA module and, one still loaded (the
#: guests' engines hold nvidia-uvm), fails with the ERROR "An NVIDIA kernel module '%s' appears to already be loaded
#: in your kernel. ..." (kernel.c L1658-1723); there is no question and no option to go on (545 added both). The
#: check is skipped only for --kernel-module-only with --kernel-name (L1669: no userspace installed) or
#: --no-kernel-module (no module built); --skip-module-unload "is ignored when the driver is being installed"
#: (option_table.h L155-158).
MODULE_LOADED = "--allow-installation-with-running-driver"
#: The host install cannot be done without it.
REQUIRED = ("--dkms",)
UNLOAD = "modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia"


def version_key(version: str) -> tuple[int, ...]:
    """Numbers compared as numbers: 535.216.01 < 545.23.06 < 550.54.14; NVIDIA's old 1.0-6106 is (1, 0, 6106),
    older than every 71.x and later."""
    return tuple(int(part) for part in re.split(r"[.-]", version) if ascii_digits(part))


def knows(version: str, name: str) -> bool:
    """Whether the installer of driver ``version`` knows option ``name`` (one of ``OPTIONS``; KeyError else)."""
    return version_key(version) >= version_key(BY_NAME[name].since)


def installer_args(version: str, kernel: str, log: str) -> list[str]:
    """The options for the host install with driver ``version``'s installer, in ``OPTIONS``' order: those it knows,
    nothing else (``refusal`` says whether the install can be done at all)."""
    values = {"--kernel-name": kernel, "--log-file-name": log}
    return [option.name + (f"={values[option.name]}" if option.name in values else "")
            for option in OPTIONS if knows(version, option.name)]


def refusal(version: str, loaded: str | None) -> str | None:
    """Why driver ``version``'s installer cannot do the host install with the module ``loaded`` (its version; None:
    none loaded), naming the option it lacks and the version that added it; None where it can."""
    for name in REQUIRED:
        if not knows(version, name):
            return (f"NVIDIA's installer {version} has no {name} (added in {BY_NAME[name].since}): the upgrade "
                    "builds the module through DKMS for the kernel the node boots next")
    if loaded is not None and not knows(version, MODULE_LOADED):
        return (f"NVIDIA's installer {version} refuses to install while an NVIDIA module is loaded (nvidia "
                f"{loaded} is, the GPU guests' engines hold it): it has no {MODULE_LOADED} (added in "
                f"{BY_NAME[MODULE_LOADED].since})")
    return None
