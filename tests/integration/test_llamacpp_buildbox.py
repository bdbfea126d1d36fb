"""llama-server built for the guest's release, for real (labwright.llamacpp.buildbox): the lab's build boxes of a
release other than this machine's, and the deploy choosing one on its own.

- A build for Debian 13 guests made on this Debian 12 machine, in the lab's trixie build box (``<profile>-build-
  trixie``, the Vulkan build's box): its ELF needs a glibc newer than Debian 12's (read from ``.gnu.version_r``), no
  newer than the box's; it runs in the Debian 13 box and does not start in the Debian 12 one (``GLIBC_2.38' not
  found``), and the deploy's choice pushes this machine's own build to a Debian 13 guest (no box: it fits).
- The deploy on a Debian 12 guest when "this machine's build" is that Debian 13 one (the cache root pointed at a copy
  holding it, as a Debian 13 controller's cache does): it builds the CPU build for bookworm in the lab's bookworm
  box, checks its needs against the guest's glibc, pushes it and the server answers; a second run changes nothing.
  Reached over SSH instead (no lab daemon behind the host), the same deploy is refused in one line naming
  ``labwright build llamacpp --release bookworm``, nothing installed.

What it costs: the marker ``box_build``. Cold (no ~/.cache/labwright/llama/VERSION/cpu-trixie/manifest.json, no
bookworm box), two CPU builds in boxes: ~6 min each on 2 idle cores, 53-55 min each on 2 cores at load 18 (both at
once, 2026-11-28). Warm (the trixie build cached, the bookworm box's build directory kept), the deploy's box build
is a configure and a no-op ninja: the deploy 24 s, the module 54 s at load 18. ``-m "not box_build"`` leaves it out.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from pathlib import Path

import pytest

from labwright import paths
from labwright.lab.lab import instance_address
from labwright.llamacpp import buildbox
from labwright.llamacpp.build import PINNED, cache_dir
from labwright.llamacpp.deploy_data import BuildChoice, glibc_refusal, release_build_for
from labwright.llamacpp.tiny_model import write_tiny_gguf
from labwright.matrix import elfsyms
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import DeployRun, run_pyinfra

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.box_build]

REPO = Path(__file__).resolve().parents[2]
MODEL = "/srv/models/tiny.gguf"
INSTALLED = "/usr/local/bin/llama-server"


def sh(lab: Lab, name: str, script: str) -> str:
    result = lab.client.exec(name, ["sh", "-c", script])
    assert result.exit_code == 0, f"{script!r} failed: {result.stderr.decode()}"
    return result.stdout.decode()


def need_of(binary: Path) -> tuple[int, int]:
    need = elfsyms.glibc_needed(elfsyms.version_needs(binary))
    assert need is not None
    return need


@pytest.fixture(scope="module")
def trixie_build(lab: Lab) -> Path:
    """The CPU build for Debian 13, made in the lab's trixie build box (cached; see the module docstring's cost)."""
    started = time.monotonic()
    binary = buildbox.build_for_release("trixie", lab.client, lab.spec.profile, lab.client.endpoint.tool)
    print(f"\nCPU llama-server for trixie ready in {time.monotonic() - started:.1f}s: {binary}")
    return binary


def runs_in(lab: Lab, box: str, binary: Path) -> tuple[int, str]:
    """Push ``binary`` into ``box`` and run ``--version`` there: exit code and its output."""
    with binary.open("rb") as handle:
        lab.client.push_file(box, "/tmp/llama-server-probe", handle, mode=0o755)
    result = lab.client.exec(box, ["/tmp/llama-server-probe", "--version"])
    return result.exit_code, (result.stdout + result.stderr).decode(errors="replace")


def test_a_build_for_debian_13_made_in_the_trixie_box_needs_its_glibc(lab: Lab, trixie_build: Path) -> None:
    manifest = json.loads((trixie_build.parent.parent / "manifest.json").read_text())
    box = buildbox.ensure_box(lab.client, lab.spec.profile, "trixie", lab.client.endpoint.tool).name  # starts it
    assert manifest["release"] == "trixie" and manifest["built_in"] == box and manifest["backend"] == "cpu"
    assert manifest["files"] == {"bin/llama-server": hashlib.sha256(trixie_build.read_bytes()).hexdigest()}
    need = need_of(trixie_build)
    assert manifest["glibc_needed"] == f"{need[0]}.{need[1]}"
    box_glibc = sh(lab, box, "getconf GNU_LIBC_VERSION").strip()  # a Debian 13 guest's glibc
    assert manifest["toolchain"]["glibc"] == box_glibc.split()[-1]
    assert (2, 36) < need <= glibc_of(box_glibc)  # newer than Debian 12's, no newer than its own release's
    choice = BuildChoice("cpu", release="trixie")
    assert glibc_refusal(choice, (need, "llama-server"), box_glibc, "@lxd/trixie-guest") is None
    assert "it would not start there" in (glibc_refusal(choice, (need, "llama-server"), "glibc 2.36", "g") or "")
    # for real: it runs in the Debian 13 box, and the Debian 12 one's loader refuses it
    code, output = runs_in(lab, box, trixie_build)
    assert code == 0 and "version:" in output, output
    bookworm_box = buildbox.ensure_box(lab.client, lab.spec.profile, "bookworm", lab.client.endpoint.tool)
    code, output = runs_in(lab, bookworm_box.name, trixie_build)
    assert code != 0 and re.search(r"GLIBC_2\.3[7-9]' not found|GLIBC_2\.4\d' not found", output), output
    # this Debian 12 machine's own build fits a Debian 13 guest as it is: the deploy builds nothing for it
    own = cache_dir() / "llama-server"
    if own.is_file():
        mine = need_of(own)
        assert mine <= (2, 36)
        assert release_build_for(BuildChoice("cpu"), (mine, "llama-server"), box_glibc,
                                 {"ID": "debian", "VERSION_CODENAME": "trixie"}) is None


def glibc_of(getconf: str) -> tuple[int, int]:
    major, minor = re.findall(r"\d+", getconf)[:2]
    return int(major), int(minor)


@pytest.fixture(scope="module")
def debian13_controller_cache(trixie_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache root whose ``llama/VERSION/llama-server`` is the trixie build, as a Debian 13 controller's is; the
    lab images and the sdist linked from the real cache (nothing downloaded or debootstrapped again)."""
    root = tmp_path_factory.mktemp("controller-cache")
    llama = root / "llama" / PINNED.version
    llama.mkdir(parents=True)
    shutil.copy2(trixie_build, llama / "llama-server")
    (llama / "llama-server.sha256").write_text(hashlib.sha256(trixie_build.read_bytes()).hexdigest() + "\n")
    real = paths.cache_root()
    if (real / "images").is_dir():
        (root / "images").symlink_to(real / "images")
    if (cache_dir() / PINNED.filename).is_file():
        (llama / PINNED.filename).symlink_to(cache_dir() / PINNED.filename)
    return root


@pytest.fixture(scope="module")
def debian12_guest(lab: Lab, tmp_path_factory: pytest.TempPathFactory):
    name = lab.fresh("lwbox12")
    try:
        model = write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf")
        sh(lab, name, "mkdir -p /srv/models")
        with model.open("rb") as handle:
            lab.client.push_file(name, MODEL, handle, mode=0o644)
        yield name
    finally:
        lab.remove(name)


def deploy(target: str, cache: Path, *data: str) -> DeployRun:
    return run_pyinfra(target, "deploys/llamacpp.py", f"llamacpp_model={MODEL}", "llamacpp_ctx_size=4096", *data,
                       cwd=REPO, timeout=3000, env={"LABWRIGHT_CACHE": str(cache)})


def test_without_a_lab_daemon_the_refusal_names_the_command(lab: Lab, debian12_guest: str, trixie_build: Path,
                                                           debian13_controller_cache: Path, tmp_path: Path) -> None:
    """The guest over SSH (pyinfra's @ssh: no daemon to make a box on) and no bookworm build cached: one line."""
    address = instance_address(lab.client, debian12_guest)
    assert address
    key_type, key = sh(lab, debian12_guest, "cat /etc/ssh/ssh_host_ed25519_key.pub").split()[:2]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"{address} {key_type} {key}\n")
    cache = tmp_path / "cache"
    shutil.copytree(debian13_controller_cache, cache, symlinks=True)
    run = deploy(address, cache, "ssh_user=root", f"ssh_key={lab.private_key_path}",
                 f"ssh_known_hosts_file={known_hosts}")
    assert run.rc != 0
    lines = [line for line in run.output.splitlines() if "llamacpp_build: cpu: " in line]
    assert len(lines) == 1, run.output[-3000:]
    assert re.search(r"llama-server \(CPU build\) needs glibc 2\.\d+ \(GLIBC_2\.\d+, read from its ELF\), "
                     rf"{re.escape(address)} has glibc 2\.36: it would not start there; build it for the guest's "
                     r"release in the lab's build box with `labwright build llamacpp --release bookworm` on this "
                     r"machine", lines[0]), lines[0]
    assert "Beginning operation run" not in run.output and "Traceback" not in run.output, run.output[-3000:]
    assert not sh(lab, debian12_guest, f"ls /etc/systemd/system/llama-server.service {INSTALLED} 2>/dev/null "
                                       "|| true").strip()
    assert not (cache / "llama" / PINNED.version / "cpu-bookworm").exists()


def test_the_deploy_builds_for_a_debian_12_guest_in_the_bookworm_box(lab: Lab, debian12_guest: str,
                                                                     debian13_controller_cache: Path) -> None:
    started = time.monotonic()
    run = deploy(lab.host(debian12_guest), debian13_controller_cache)
    first = time.monotonic() - started
    assert run.rc == 0, run.output[-5000:]
    box = buildbox.box_name(lab.spec.profile, "bookworm")
    assert f"building the CPU build for Debian bookworm in the lab's build box {box}" in run.output, run.output[-3000:]
    built = debian13_controller_cache / "llama" / PINNED.version / "cpu-bookworm"
    manifest = json.loads((built / "manifest.json").read_text())
    assert manifest["release"] == "bookworm" and manifest["built_in"] == box
    need = need_of(built / "bin" / "llama-server")
    assert need <= (2, 36) and manifest["glibc_needed"] == f"{need[0]}.{need[1]}"
    on_guest = sh(lab, debian12_guest, f"sha256sum {INSTALLED}").split()[0]
    assert on_guest == manifest["files"]["bin/llama-server"]
    assert sh(lab, debian12_guest, "systemctl is-active llama-server").strip() == "active"
    # the second run: the cached release build, nothing to push or restart, no box asked
    started = time.monotonic()
    again = deploy(lab.host(debian12_guest), debian13_controller_cache)
    assert again.rc == 0 and again.totals.changed == 0, again.output[-3000:]
    assert "building the CPU build" not in again.output
    print(f"\ndeploy with the bookworm box build: {first:.0f}s; again, unchanged: {time.monotonic() - started:.0f}s")


# A Debian 13 controller's glibc (trixie's libc6 2.41), answered to the deploy's os.confstr in its own process: the
# rest of that process (and the guest, the box, the build) is this Debian 12 machine's, for real.
DEBIAN_13_GLIBC = '''\
import os
_confstr = os.confstr


def confstr(name):
    if name in ("CS_GNU_LIBC_VERSION", os.confstr_names.get("CS_GNU_LIBC_VERSION")):
        return "glibc 2.41"
    return _confstr(name)


os.confstr = confstr
'''


def test_a_debian_13_controller_with_nothing_built_builds_only_the_guest_s(lab: Lab, debian12_guest: str,
                                                                          tmp_path: Path) -> None:
    """No llama-server built yet on a Debian 13 controller, a Debian 12 guest: the deploy builds the guest's
    release's build in the box (deploy_data.first_build_for) and never this machine's own, which the guest could
    not run anyway (a cold Debian 13 fresh-check built both: docs/fresh-check.md)."""
    cache = tmp_path / "cache"
    llama = cache / "llama" / PINNED.version
    llama.mkdir(parents=True)
    real = paths.cache_root()
    if (real / "images").is_dir():
        (cache / "images").symlink_to(real / "images")
    if (cache_dir() / PINNED.filename).is_file():
        (llama / PINNED.filename).symlink_to(cache_dir() / PINNED.filename)
    bookworm = buildbox.release_cache_dir("bookworm")
    if (bookworm / "manifest.json").is_file():  # the box's build, as it would make it again (see the module cost)
        shutil.copytree(bookworm, llama / bookworm.name, symlinks=True)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(DEBIAN_13_GLIBC)
    run = run_pyinfra(lab.host(debian12_guest), "deploys/llamacpp.py", f"llamacpp_model={MODEL}",
                      "llamacpp_ctx_size=4096", cwd=REPO, timeout=3000,
                      env={"LABWRIGHT_CACHE": str(cache), "PYTHONPATH": str(site)})
    assert run.rc == 0, run.output[-5000:]
    assert re.search(r"no llama-server built yet; this machine's glibc 2\.41 is newer than glibc 2\.36: building it "
                     r"for Debian bookworm in the lab's build box, not here", run.output), run.output[-3000:]
    assert not (llama / "llama-server").exists(), "this machine's own build was made too"
    manifest = json.loads((llama / "cpu-bookworm" / "manifest.json").read_text())
    assert sh(lab, debian12_guest, f"sha256sum {INSTALLED}").split()[0] == manifest["files"]["bin/llama-server"]
    assert sh(lab, debian12_guest, "systemctl is-active llama-server").strip() == "active"
