"""A fake NVIDIA host layout for tests: ``/proc`` files and real ``mknod`` device nodes below a root.

No GPU is needed: the nodes carry the majors/minors a real driver gives them (195:N for the GPUs,
195:255 nvidiactl, 195:254 modeset, a dynamic major for nvidia-uvm and nvidia-caps), which is all
passthrough wiring looks at. Opening them in a container gives ENXIO, as no driver answers.

LXD only passes ``unix-char`` sources that live under ``/dev``, so integration tests put the root in
a fresh directory below ``/dev`` (``fake_root_in_dev``), never on top of the host's own nodes.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shlex
import shutil
import stat
from pathlib import Path

DRIVER_VERSION = "550.54.14"
VERSION_TEXT = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Thu Feb 22 01:44:30 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
PROC_DEVICES = """Character devices:
  1 mem
  4 /dev/vc/0
  5 /dev/tty
 10 misc
136 pts
195 nvidia-frontend
{uvm_major} nvidia-uvm
{caps_major} nvidia-caps
226 drm

Block devices:
  7 loop
  8 sd
{uvm_major} blkext
"""


def make_fake_nvidia_host(
    root: str | Path,
    driver: str | None = DRIVER_VERSION,
    gpus: int = 1,
    uvm_major: int = 509,
    caps_major: int = 511,
    with_uvm: bool = True,
    with_caps: bool = True,
    extra_files: bool = True,
) -> Path:
    """Write ``root/proc/{devices,driver/nvidia/version}`` and mknod ``root/dev/nvidia*``. ``driver=None``
    makes a host without the driver (no version file, no nodes). Needs root (mknod)."""
    root = Path(root)
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "dev").mkdir(parents=True, exist_ok=True)
    (root / "etc" / "systemd" / "system").mkdir(parents=True, exist_ok=True)  # where the boot unit goes
    (root / "proc" / "devices").write_text(PROC_DEVICES.format(uvm_major=uvm_major, caps_major=caps_major))
    if driver is None:
        return root
    (root / "proc" / "driver" / "nvidia").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "driver" / "nvidia" / "version").write_text(VERSION_TEXT.format(version=driver))
    nodes = [(f"nvidia{i}", 195, i) for i in range(gpus)]
    nodes += [("nvidiactl", 195, 255), ("nvidia-modeset", 195, 254)]
    if with_uvm:
        nodes += [("nvidia-uvm", uvm_major, 0), ("nvidia-uvm-tools", uvm_major, 1)]
    for name, major, minor in nodes:
        _mknod(root / "dev" / name, 0o666, major, minor)
    if with_caps:
        (root / "dev" / "nvidia-caps").mkdir(exist_ok=True)
        for minor in (1, 2):
            _mknod(root / "dev" / "nvidia-caps" / f"nvidia-cap{minor}", 0o444, caps_major, minor)
    if extra_files:
        # Not device nodes: must be ignored by the scan.
        (root / "dev" / "nvidia-notes.txt").write_text("not a device\n")
    return root


def _mknod(path: Path, mode: int, major: int, minor: int) -> None:
    os.mknod(path, mode | stat.S_IFCHR, os.makedev(major, minor))
    os.chmod(path, mode)  # mknod's mode is cut by the umask; the driver's nodes are exactly 0666


def reboot(root: str | Path, everything: bool = False) -> None:
    """What a host reboot leaves: the driver loaded again, but only the nodes something made at boot. With
    nvidia-persistenced running (most GPU hosts) /dev/nvidia0, nvidiactl and the caps come back, but nothing
    uses nvidia-uvm, so /dev/nvidia-uvm and -tools stay missing; ``everything`` drops every /dev/nvidia* node
    (no persistenced, no udev rule: the nvidia module creates no node itself)."""
    dev = Path(root) / "dev"
    for path in dev.glob("nvidia*"):
        if not everything and path.name not in ("nvidia-uvm", "nvidia-uvm-tools"):
            continue
        if path.is_dir():
            shutil.rmtree(path)
        elif path.is_char_device():
            path.unlink()


def run_boot_unit(root: str | Path, unit_text: str) -> list[str]:
    """Run a unit's ``ExecStart=/usr/bin/nvidia-modprobe ...`` lines against the fake tree as nvidia-modprobe
    does (NVIDIA/nvidia-modprobe 610.43.03, nvidia-modprobe.c main() and modprobe-utils/nvidia-modprobe-utils.c):
    ``-c N`` mknods /dev/nvidiaN (N=255: /dev/nvidiactl) with major 195; ``-m`` /dev/nvidia-modeset (195:254);
    ``-u -c B`` /dev/nvidia-uvm (minor B) and /dev/nvidia-uvm-tools (B+1) with nvidia-uvm's major from
    /proc/devices (nvidia_get_chardev_major); ``-f PROC`` /dev/nvidia-caps/nvidia-cap<minor> (mig/config is 1,
    mig/monitor 2). A node already right is left alone. Returns the paths made."""
    root = Path(root)
    majors = {name: int(major) for major, name in
              (line.split() for line in (root / "proc" / "devices").read_text().split("Block devices:")[0]
               .splitlines()[1:] if line.strip())}
    made = []

    def node(name: str, major: int, minor: int, mode: int = 0o666) -> None:
        path = root / "dev" / name
        path.parent.mkdir(exist_ok=True)
        if not path.exists():
            _mknod(path, mode, major, minor)
            made.append("/dev/" + name)

    for line in unit_text.splitlines():
        if not line.startswith("ExecStart="):
            continue
        argv = line.removeprefix("ExecStart=").split()
        assert argv[0] == "/usr/bin/nvidia-modprobe", argv
        args = argv[1:]
        minors = [int(args[i + 1]) for i, a in enumerate(args) if a == "-c"]
        if "-u" in args:
            for base in minors:
                node("nvidia-uvm", majors["nvidia-uvm"], base)
                node("nvidia-uvm-tools", majors["nvidia-uvm"], base + 1)
            continue
        for minor in minors:
            node("nvidiactl" if minor == 255 else f"nvidia{minor}", 195, minor)
        if "-m" in args:
            node("nvidia-modeset", 195, 254)
        for i, a in enumerate(args):
            if a == "-f":
                minor = {"mig/config": 1, "mig/monitor": 2}[args[i + 1].split("capabilities/", 1)[1]]
                node(f"nvidia-caps/nvidia-cap{minor}", majors["nvidia-caps"], minor, 0o444)
    return made


def fake_root_in_dev(prefix: str = "lwtest-nv") -> Path:
    """A new empty directory below /dev for a fake layout LXD will accept as unix-char sources."""
    path = Path("/dev") / f"{prefix}-{secrets.token_hex(3)}"
    path.mkdir()
    return path


def remove_fake_root(root: str | Path) -> None:
    """Remove a fake layout; refuses the real ``/`` and ``/dev`` whatever it is given."""
    root = Path(root).resolve()
    if root in (Path("/"), Path("/dev")) or root.parent == Path("/"):
        raise ValueError(f"refusing to remove {root}: not a fake layout")
    shutil.rmtree(root, ignore_errors=True)


def make_container_libraries(root: str | Path, version: str, directory: str = "/usr/lib/x86_64-linux-gnu") -> None:
    """The userspace side as a driver install leaves it: versioned files plus unversioned links."""
    libdir = Path(root) / directory.lstrip("/")
    libdir.mkdir(parents=True, exist_ok=True)
    for lib in ("libcuda.so", "libnvidia-ml.so"):
        (libdir / f"{lib}.{version}").write_bytes(b"\x7fELF fake")
        for link in (f"{lib}.1", lib):
            if (libdir / link).is_symlink() or (libdir / link).exists():
                (libdir / link).unlink()
            (libdir / link).symlink_to(f"{lib}.{version}")


def nvidia_smi_query_lines(version: str = DRIVER_VERSION, gpus: tuple[tuple[str, str, int], ...] = (
        ("NVIDIA GeForce RTX 3090", "8.6", 24576),)) -> str:
    """What ``nvidia-smi --query-gpu=index,name,uuid,compute_cap,driver_version,memory.total --format=csv,noheader``
    prints: one line per GPU, the fields in the order asked joined by ", ", memory with its unit (nvidia-smi(1),
    "--format=csv"; without ``nounits`` "24576 MiB")."""
    return "".join(f"{i}, {name}, GPU-{i:08x}-1111-2222-3333-444455556666, {cap}, {version}, {mib} MiB\n"
                   for i, (name, cap, mib) in enumerate(gpus))


#: The ``--query-gpu`` fields the double knows (a subset of ``nvidia-smi --help-query-gpu``; "name"/"gpu_name" and
#: "uuid"/"gpu_uuid" are the same field under two names there).
QUERY_FIELDS = ("timestamp", "driver_version", "count", "index", "name", "gpu_name", "uuid", "gpu_uuid",
                "pci.bus_id", "memory.total", "memory.used", "memory.free", "compute_cap")
#: The first driver branch whose nvidia-smi has ``compute_cap``: absent from 470.182.03's ``--help-query-gpu``
#: (huggingface/candle#733) and refused by 470.256.02 (canonical/inference-snaps#89); listed by 510+ drivers.
#: The exact first release between 470 and 510 (495?) is not established; the lab treats everything below 510 as 470.
COMPUTE_CAP_SINCE = 510


def query_fields(version: str) -> tuple[str, ...]:
    """The fields the nvidia-smi of driver ``version`` accepts (of QUERY_FIELDS)."""
    major = int(version.split(".")[0])
    return tuple(f for f in QUERY_FIELDS if f != "compute_cap" or major >= COMPUTE_CAP_SINCE)


def nvidia_smi_double(version: str = DRIVER_VERSION, gpus: tuple[tuple[str, str, int], ...] = (
        ("NVIDIA GeForce RTX 3090", "8.6", 24576),), fields: tuple[str, ...] | None = None) -> str:
    """A POSIX-sh stand-in for nvidia-smi that answers ``--query-gpu=F1,F2 --format=csv,noheader[,nounits]`` as
    the real one does (tests/conformance/nvidia-smi/): each GPU's values for the fields asked, in the order asked,
    joined by ", " (memory "24576 MiB", the unit dropped with ``nounits``); a field it does not know (``fields``,
    by default ``query_fields(version)``: no ``compute_cap`` below 510) fails the whole query with ``Field "X" is
    not a valid field to query.`` on stdout and exit 2, naming the first unknown field only. Anything else: the
    "could not communicate" line and exit 9, as ``fake_nvidia_smi_script``."""
    known = "," + ",".join(fields if fields is not None else query_fields(version)) + ","
    values = []
    for i, (name, cap, mib) in enumerate(gpus):
        answers = {"index": str(i), "name": name, "gpu_name": name, "uuid": f"GPU-{i:08x}-1111-2222-3333-444455556666",
                   "driver_version": version, "memory.total": f"{mib} MiB", "memory.used": "1 MiB",
                   "memory.free": f"{mib - 1} MiB", "compute_cap": cap, "count": str(len(gpus)),
                   "pci.bus_id": f"00000000:{i + 1:02X}:00.0", "gpu_uuid": f"GPU-{i:08x}-1111-2222-3333-444455556666",
                   "timestamp": "2026/11/27 10:00:00.000"}
        values += [f"  {i}:{field}) v={shlex.quote(value)};;" for field, value in answers.items()]
    return ("#!/bin/sh\nq=; fmt=\nfor a in \"$@\"; do case \"$a\" in --query-gpu=*) q=${a#--query-gpu=};; "
            "--format=*) fmt=${a#--format=};; esac; done\n"
            "if [ -z \"$q\" ]; then echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA "
            "driver.'; exit 9; fi\n"
            f"known={shlex.quote(known)}\nifs=$IFS; IFS=,\nfor f in $q; do case \"$known\" in *\",$f,\"*) ;; "
            # the refusal then an empty line, on stdout (recorded on nvidia-smi 580.159.04, tests/conformance/
            # nvidia-smi/query-unknown-field-580.toml)
            "*) IFS=$ifs; echo \"Field \\\"$f\\\" is not a valid field to query.\"; echo; exit 2;; esac; done\n"
            "IFS=$ifs\nvalue() {\n  v=\n  case \"$1:$2\" in\n" + "\n".join(values) + "\n  esac\n"
            "  case \"$fmt\" in *nounits*) v=${v% MiB};; esac\n}\n"
            f"n=0\nwhile [ \"$n\" -lt {len(gpus)} ]; do line=; IFS=,; for f in $q; do IFS=$ifs; value \"$n\" \"$f\"; "
            "line=\"${line:+$line, }$v\"; done; IFS=$ifs; printf '%s\\n' \"$line\"; n=$((n + 1)); done\nexit 0\n")


def fake_nvidia_smi_script(query_output: str) -> str:
    """A shell script standing in for nvidia-smi in a container: prints ``query_output`` for ``--query-gpu``, exits
    9 (NVML's "driver not loaded" code) for anything else."""
    return ("#!/bin/sh\ncase \"$*\" in *--query-gpu=*) cat <<'LWEOF'\n" + query_output + "LWEOF\nexit 0;; esac\n"
            "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n")


# --- the host upgrade's side of the tree: kernels, DKMS builds, the installer repository -------------------------
def make_upgrade_host(root: str | Path, running: str = "6.8.12-4-pve", new: str | None = "6.8.12-9-pve",
                      built: dict[str, list[str]] | None = None, repository: tuple[str, ...] = ("550.54.15",),
                      hostname: str = "lwnode1", uvm_major_after_reboot: int | None = None,
                      host_userspace: bool = False, installers: dict[str, str] | None = None,
                      unfinished: dict[str, list[str]] | None = None) -> Path:
    """Add to a fake NVIDIA host tree what `host upgrade` reads: the running kernel (/proc/sys/kernel/osrelease),
    installed kernels (/lib/modules/K), DKMS's tree (/var/lib/dkms/nvidia/VER/K/x86_64/module/nvidia.ko, as `dkms
    status` reads it), the installer repository (/var/cache/labwright/nvidia/NVIDIA-Linux-x86_64-VER.run, each a
    script standing in for NVIDIA's: ``--no-kernel-module`` installs that version's userspace), /etc/hostname, and
    the uvm major the next (simulated) boot gives. ``built``: kernel -> versions with a module built for it.
    ``host_userspace``: the running driver's libcuda/libnvidia-ml on the host too (what a host install leaves).
    ``installers``: version -> the userspace version its installer really installs (a mislabelled download).
    ``unfinished``: kernel -> versions whose DKMS build for it did not finish: what dkms 3.x leaves then, its
    temporary ``/var/lib/dkms/nvidia/VER/K/.tmp_x86_64_XXXXXX`` with nvidia.ko but not the rest, never renamed to
    ``x86_64`` (dell/dkms dkms.in do_build, v3.2.2-5 L1478-1544; tests/support/host_tools/dkms)."""
    root = Path(root)
    (root / "proc/sys/kernel").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/osrelease").write_text(running + "\n")
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/hostname").write_text(hostname + "\n")
    for kernel in (running, *([new] if new else [])):
        (root / "lib/modules" / kernel).mkdir(parents=True, exist_ok=True)
    for kernel, versions in (built if built is not None else {running: [DRIVER_VERSION]}).items():
        for version in versions:
            module = root / "var/lib/dkms/nvidia" / version / kernel / "x86_64/module"
            module.mkdir(parents=True, exist_ok=True)
            (module / "nvidia.ko").write_bytes(b"\x7fELF fake\n")
    for kernel, versions in (unfinished or {}).items():
        for version in versions:
            module = root / "var/lib/dkms/nvidia" / version / kernel / ".tmp_x86_64_Q7fz2K/module"
            module.mkdir(parents=True, exist_ok=True)
            (module / "nvidia.ko").write_bytes(b"\x7fELF fake, the build stopped here\n")
    repo = root / "var/cache/labwright/nvidia"
    repo.mkdir(parents=True, exist_ok=True)
    for version in repository:
        inside = (installers or {}).get(version, version)
        write_installer(repo, version, fake_run_installer(inside))
    if host_userspace:
        running_driver = (root / "proc/driver/nvidia/version").read_text().split("Kernel Module")[1].split()[0]
        make_container_libraries(root, running_driver)
    if uvm_major_after_reboot is not None:
        (root / "labwright-sim").mkdir(exist_ok=True)
        (root / "labwright-sim/uvm-major-after-reboot").write_text(f"{uvm_major_after_reboot}\n")
    return root


def write_installer(repo: Path, version: str, text: str) -> Path:
    """``NVIDIA-Linux-x86_64-VERSION.run`` in the repository with its sha256 recorded beside it, as NVIDIA publishes
    it (``.run.sha256sum``, sha256sum format: labwright.hostupgrade.trust verifies it before every run)."""
    installer = repo / f"NVIDIA-Linux-x86_64-{version}.run"
    installer.write_text(text)
    record_sha256(installer)
    return installer


def record_sha256(installer: Path) -> None:
    digest = hashlib.sha256(installer.read_bytes()).hexdigest()
    installer.with_name(installer.name + ".sha256sum").write_text(f"{digest}  {installer.name}\n")


def fake_run_installer(version: str, libdir: str = "/usr/lib/x86_64-linux-gnu") -> str:
    """A stand-in for NVIDIA-Linux-x86_64-VERSION.run: with ``--no-kernel-module`` it replaces the guest's
    libcuda/libnvidia-ml with VERSION's (versioned files and .so.1 links, as the installer leaves them) and
    installs an nvidia-smi reporting VERSION (``nvidia_smi_double``: no compute_cap field below 510). A host
    install (no ``--no-kernel-module``) runs the nvidia-installer double of tests/support/host_tools on the tree
    ``$LW_FAKE_ROOT`` when ``$LW_HOST_TOOLS`` names it (the .run's makeself stub passes every other argument to
    nvidia-installer and exits with its status: makeself 1.6.0-nv2, scriptargs and ``exit $res``); without it,
    refused (exit 1)."""
    smi = nvidia_smi_double(version)  # a 470 installer's nvidia-smi refuses compute_cap as the real one does
    return ("#!/bin/sh\ncase \" $* \" in *' --no-kernel-module '*) ;; *) "
            "if [ -n \"$LW_HOST_TOOLS\" ]; then LW_INSTALLER_VERSION=" + version + " exec python3 "
            "\"$LW_HOST_TOOLS/nvidia-installer\" \"$@\"; fi; "
            "echo 'needs --no-kernel-module here' >&2; exit 1;; esac\nset -e\n"
            f"mkdir -p {libdir}\nrm -f {libdir}/libcuda.so.* {libdir}/libnvidia-ml.so.*\n"
            f"for l in libcuda.so libnvidia-ml.so; do echo fake > {libdir}/$l.{version}; "
            f"ln -sf $l.{version} {libdir}/$l.1; done\n"
            "mkdir -p /usr/local/bin\n"
            # a new file renamed over the old one, as installers replace files (never an in-place edit)
            "cat > /usr/local/bin/.nvidia-smi.new <<'LWSMI'\n" + smi
            + "LWSMI\nchmod 755 /usr/local/bin/.nvidia-smi.new\n"
            "mv -f /usr/local/bin/.nvidia-smi.new /usr/local/bin/nvidia-smi\n")
