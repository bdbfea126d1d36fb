"""Test support for desktop guests: a cached installed desktop, a real RDP client under Xvfb, and a PNG reader.

The ~1 GB package install (2-3 minutes on a warm mirror) is done once and kept as a STOPPED container of the test
lab, ``lwtest-desktop-<digest>``, where the digest covers the package list, the Firefox source and the lab image
the template was made from. Tests and the benchmark clone it through the guest model (``clone:``) in seconds; a
changed recipe builds a new cache and removes the old one. It carries the lab's key, so ``lab down`` removes it.

The cache is made by deploys/desktop.py itself with ``desktop_stage=packages`` (packages only: no user, no TLS key,
no xrdp.ini changes), so the cloned guest still goes through every configuration step of a first deploy.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import struct
import subprocess
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from labwright import paths
from labwright.desktop.recipe import recipe_digest
from labwright.errors import OperationFailed
from labwright.guests.lxd import LxdBackend
from labwright.guests.model import spec_from_data
from labwright.lab import lab as lab_ops
from labwright.lxd.client import LxdClient
from labwright.testing.lab_fixture import TEMPLATE, Lab
from labwright.testing.pyinfra_output import DeployRun, run_pyinfra
from support import guest_apt

REPO = Path(__file__).resolve().parents[2]
CACHE_PREFIX = "lwtest-desktop-"
CACHE_KEY = "user.labwright.desktop-cache"
BUILDER_VERSION = "1"
FIREFOX_SOURCE = "debian-esr"  # Mozilla's repository is not reachable from the test machines
GUEST_MEMORY = "2G"


def cache_name(lab: Lab) -> str:
    base = (lab.client.instance(TEMPLATE).get("config") or {}).get(lab_ops.IMAGE_KEY, "")
    return CACHE_PREFIX + recipe_digest("debian", FIREFOX_SOURCE, f"{BUILDER_VERSION}:{base}")


def guest_data(lab: Lab, clone: str) -> dict[str, object]:
    """The desktop guest as the guest model declares it: unprivileged (the default), nesting, 2 GiB."""
    return {"backend": "lxd", "clone": clone, "profiles": [lab.spec.profile], "features": {"nesting": True},
            "memory": GUEST_MEMORY}


def make_guest(lab: Lab, name: str, clone: str) -> str:
    """Create and start ``name`` as a copy of ``clone`` through the guest model; wait for its network."""
    spec = spec_from_data(f"@lxd/{name}", guest_data(lab, clone), source="desktop tests")
    LxdBackend(lab.client).apply(spec)
    lab_ops.wait_ready(lab.client, name)
    return name


def _set_config(client: LxdClient, name: str, values: dict[str, str]) -> None:
    client.request("PATCH", f"/1.0/instances/{name}", {"config": values})


def ensure_cache(lab: Lab, log=print) -> tuple[str, DeployRun | None]:
    """The stopped cache container's name, building it when missing (returns the packages-stage deploy run then).

    One builder at a time on this machine (a file lock): a second test session waits for the first one's build
    instead of taking its half-built container for an interrupted one.
    """
    lock_dir = paths.cache_root()
    lock_dir.mkdir(parents=True, exist_ok=True)
    with (lock_dir / "desktop-cache.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_cache(lab, log)


def _ensure_cache(lab: Lab, log) -> tuple[str, DeployRun | None]:
    name = cache_name(lab)
    for other in lab.client.iter_instance_names():
        if other.startswith(CACHE_PREFIX) and other != name:
            log(f"removing stale desktop cache {other}")
            lab.remove(other)
    found = lab.client.instance_or_none(name)
    if found is not None and found["status"] == "Stopped" and (found.get("config") or {}).get(CACHE_KEY) == name:
        return name, None
    if found is not None:  # an interrupted build
        lab.remove(name)
    log(f"building the desktop cache {name} (first run: ~1 GB of packages, 2-4 minutes)")
    make_guest(lab, name, TEMPLATE)
    try:
        run = run_pyinfra(f"@lxd/{name}", "deploys/desktop.py", "desktop_stage=packages",
                          f"desktop_firefox_source={FIREFOX_SOURCE}", cwd=REPO, timeout=1200)
        if run.rc != 0:
            raise OperationFailed(f"desktop cache build failed:\n{run.output[-3000:]}")
        # The downloaded .debs go; the apt lists stay (apt-cache policy shows where Firefox came from).
        lab.client.exec(name, ["sh", "-c", guest_apt.command("clean") + "; rm -rf /tmp/*"])
        lab.stop(name, timeout=60)
        _set_config(lab.client, name, {CACHE_KEY: name, lab_ops.LAB_KEY: lab.spec.name})
    except BaseException:
        lab.remove(name)
        raise
    return name, run


# --- a real RDP client ----------------------------------------------------------------------------
@dataclass
class RdpSession:
    display: str
    log: Path
    proc: subprocess.Popen[bytes]

    def screenshot(self, path: Path) -> Path:
        # PNG24: 8-bit RGB always; ImageMagick picks a 1-bit grey PNG for a still all-black screen otherwise.
        subprocess.run(["import", "-display", self.display, "-window", "root", f"PNG24:{path}"], check=True,
                       capture_output=True, timeout=30)
        return path


def free_display() -> str:
    for number in range(90, 140):
        if not os.path.exists(f"/tmp/.X11-unix/X{number}") and not os.path.exists(f"/tmp/.X{number}-lock"):
            return f":{number}"
    raise OperationFailed("no free X display number in :90-:139")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def xvfb(width: int = 1280, height: int = 800) -> Iterator[str]:
    """A private Xvfb display for the RDP client (the host has no screen)."""
    for tool in ("Xvfb", "xfreerdp", "import"):
        if shutil.which(tool) is None:
            raise OperationFailed(f"{tool} is not installed: run scripts/setup (it installs scripts/apt/desktop.list)")
    display = free_display()
    proc = subprocess.Popen(["Xvfb", display, "-screen", "0", f"{width}x{height}x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(f"/tmp/.X11-unix/X{display[1:]}"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise OperationFailed(f"Xvfb {display} did not start")
            time.sleep(0.05)
        yield display
    finally:
        _stop(proc)


@contextmanager
def rdp_client(display: str, address: str, user: str, password: str, log: Path, port: int = 3389,
               ) -> Iterator[RdpSession]:
    """``xfreerdp`` (FreeRDP 2, Debian's freerdp2-x11) connected to ``address``; the password goes on stdin."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["xfreerdp", f"/v:{address}:{port}", f"/u:{user}", "/from-stdin:force", "/cert:ignore", "/size:1024x768",
             "-grab-keyboard", "/log-level:INFO"],
            stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "DISPLAY": display})
        assert proc.stdin is not None
        proc.stdin.write(password.encode() + b"\n")
        proc.stdin.close()
        try:
            yield RdpSession(display, log, proc)
        finally:
            _stop(proc)


# --- PNG pixels without an imaging library ----------------------------------------------------------
def png_pixels(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """(width, height, RGB pixels) of an 8-bit RGB or RGBA, non-interlaced PNG (what Firefox and ImageMagick write)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = chunk
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or color not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG (depth {depth}, color type {color}, interlace {interlace})")
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    previous = bytearray(stride)
    pixels: list[tuple[int, int, int]] = []
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = previous[i]
            corner = previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        pixels.extend(tuple(line[i:i + 3]) for i in range(0, stride, bpp))  # type: ignore[misc]
        previous = line
    return width, height, pixels


def colour_share(pixels: list[tuple[int, int, int]]) -> Counter[tuple[int, int, int]]:
    return Counter(pixels)
