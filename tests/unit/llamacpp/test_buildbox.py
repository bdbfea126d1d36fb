"""llama-server built for the guest's release (labwright.llamacpp.buildbox, deploy_data.release_build_for): where
this machine's CPU build needs a newer glibc than the guest has, the deploy builds it in a build box of the guest's
Debian release; otherwise this machine's build is pushed as it is, whatever the releases.

The choice is a property over versions (hypothesis): a box only when the need is newer than the guest's glibc, only
for the CPU build, only for a Debian release the lab has an image of; the host's own release never matters (glibc
runs binaries linked against an older glibc). The ELF files whose needs are read are real (tests/support/elf_files).
The box itself runs in the lab: tests/integration/test_llamacpp_buildbox.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyinfra.api.exceptions import DeployError
from tests.support.elf_files import elf_needing_glibc

from labwright.cli import main
from labwright.errors import BadInput
from labwright.llamacpp import buildbox
from labwright.llamacpp.build import BUILD_TOOLS
from labwright.llamacpp.deploy_data import (
    BuildChoice,
    HostBuildMissing,
    first_build_for,
    glibc_fits,
    glibc_needed,
    glibc_refusal,
    host_build_missing,
    local_binary,
    release_build_for,
    server_files,
)

DEBIAN_12 = {"ID": "debian", "VERSION_ID": "12", "VERSION_CODENAME": "bookworm"}
DEBIAN_13 = {"ID": "debian", "VERSION_ID": "13", "VERSION_CODENAME": "trixie"}
UBUNTU = {"ID": "ubuntu", "ID_LIKE": "debian", "VERSION_ID": "24.04", "VERSION_CODENAME": "noble"}
KINDS = ("cpu", "cuda", "vulkan", "given")

minors = st.integers(min_value=17, max_value=60)
releases = st.sampled_from([DEBIAN_12, DEBIAN_13, UBUNTU, {}, {"ID": "debian"},
                            {"ID": "debian", "VERSION_CODENAME": "sid"}])


@given(need=minors, have=minors, kind=st.sampled_from(KINDS), guest=releases, host=releases)
def test_a_box_builds_only_where_this_machine_s_build_would_not_start(need, have, kind, guest, host) -> None:
    """The answer depends on the need against the guest's glibc, the build kind and the guest's release; never on
    the host's release (``host`` is drawn only to show the function is not given it)."""
    needed = ((2, need), "llama-server")
    answer = release_build_for(BuildChoice(kind), needed, f"glibc 2.{have}", guest)
    codename = guest.get("VERSION_CODENAME") if guest.get("ID") == "debian" else None
    wanted = codename if (kind == "cpu" and need > have and codename in ("bookworm", "trixie")) else None
    assert answer == wanted
    assert glibc_fits(needed, f"glibc 2.{have}") == (need <= have)
    # the refusal is the other side of the same comparison, for every build
    refusal = glibc_refusal(BuildChoice(kind), needed, f"glibc 2.{have}", "g")
    assert (refusal is None) == (need <= have)
    if answer is not None:  # the box's build that still does not fit is refused naming its cache (the last guard)
        last = glibc_refusal(BuildChoice(kind, release=answer), needed, f"glibc 2.{have}", "g")
        assert last is not None and f"remove {buildbox.release_cache_dir(answer)} and re-run" in last


@given(mine=minors, have=minors, kind=st.sampled_from(KINDS), guest=releases,
       spelled=st.sampled_from(["glibc 2.{}", "2.{}", "glibc 2.{}.1"]))
def test_the_first_build_goes_where_the_guest_can_run_it(mine, have, kind, guest, spelled) -> None:
    """No build cached yet (a cold Debian 13 controller): built in the guest release's box when this machine's
    glibc is newer than the guest's, else here. A cold run used to build here first, find that build needs
    GLIBC_2.38 on a glibc 2.36 guest, then build again in the box (two builds, ~20 min each on a loaded 2 cores)."""
    answer = first_build_for(BuildChoice(kind), spelled.format(mine), f"glibc 2.{have}", guest)
    codename = guest.get("VERSION_CODENAME") if guest.get("ID") == "debian" else None
    assert answer == (codename if (kind == "cpu" and mine > have and codename in ("bookworm", "trixie")) else None)
    # never a box build for a glibc this machine does not report (not glibc: musl, or junk)
    assert first_build_for(BuildChoice(kind), None, f"glibc 2.{have}", guest) is None
    assert first_build_for(BuildChoice(kind), "musl", f"glibc 2.{have}", guest) is None


def test_only_this_machine_s_missing_cpu_build_is_built_by_the_deploy(tmp_path: Path) -> None:
    """The deploy builds what is missing only for the CPU build with nothing given; a given binary that is missing
    stays the user's error, with its key."""
    assert host_build_missing(BuildChoice("cpu"), tmp_path)
    for choice in (BuildChoice("cpu", release="bookworm"), BuildChoice("given"), BuildChoice("vulkan"),
                   BuildChoice("cuda", ("86",), ("8.6",))):
        assert not host_build_missing(choice, tmp_path)
    (tmp_path / "llama-server").write_bytes(b"\x7fELF")
    assert not host_build_missing(BuildChoice("cpu"), tmp_path)
    with pytest.raises(HostBuildMissing, match=r"llamacpp_binary_src: .* does not exist; build it with"):
        local_binary({}, tmp_path / "empty")
    with pytest.raises(DeployError, match=r"llamacpp_binary_src: .* does not exist") as given:
        local_binary({"llamacpp_binary_src": str(tmp_path / "nope")}, tmp_path)
    assert not isinstance(given.value, HostBuildMissing)


@given(need=minors, kind=st.sampled_from(KINDS), guest=releases)
def test_no_glibc_on_the_guest_or_no_need_in_the_files(need, kind, guest) -> None:
    # a file that needs no glibc (a script, a static binary) fits anywhere: nothing to build
    assert release_build_for(BuildChoice(kind), None, None, guest) is None
    # a guest without glibc (musl: getconf has no answer) runs no glibc build: a box of its release only for Debian
    answer = release_build_for(BuildChoice(kind), ((2, need), "llama-server"), None, guest)
    assert answer in (None, "bookworm", "trixie")
    assert answer is None or kind == "cpu"


def test_a_box_build_is_never_built_again_for_another_box() -> None:
    """The box's own build carries its release: it is checked (glibc_refusal), never sent to another box."""
    needed = ((2, 38), "llama-server")
    assert release_build_for(BuildChoice("cpu", release="bookworm"), needed, "glibc 2.36", DEBIAN_12) is None


def test_the_guest_s_release_comes_from_os_release() -> None:
    text = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\nID=debian\n'
    assert buildbox.codename_of(buildbox.os_release_fields(text)) == "bookworm"
    assert buildbox.codename_of(DEBIAN_13) == "trixie"
    assert buildbox.codename_of(UBUNTU) is None  # the lab has Debian images only
    assert buildbox.codename_of({"ID": "debian", "VERSION_CODENAME": "trixie; rm -rf /"}) is None
    assert buildbox.codename_of(None) is None


def test_the_lab_s_releases_are_its_image_recipes() -> None:
    assert buildbox.release_recipes() == {"bookworm": "lab-image.toml", "trixie": "lab-image-trixie.toml"}
    assert buildbox.recipe_for("bookworm").suite == "bookworm"
    assert buildbox.recipe_for("trixie").suite == "trixie"
    with pytest.raises(BadInput, match=r"^sid: the lab has no image of that release \(it has bookworm, trixie\)"):
        buildbox.recipe_for("sid")


def test_box_names_cache_keys_and_the_recipe() -> None:
    assert buildbox.box_name("labwright", "bookworm") == "labwright-build-bookworm"
    assert buildbox.BuildBox("lwtest-build-trixie", "lwtest", "trixie").target == "lwtest-build-trixie"
    assert buildbox.BuildBox("b", "p", "trixie", "lxc", "homelab").target == "homelab:b"
    assert buildbox.release_cache_dir("bookworm").parts[-3:] == ("llama", "0.3.36", "cpu-bookworm")
    assert set(buildbox.CPU_PACKAGES) == set(BUILD_TOOLS.values())  # what this machine's own build installs
    script = buildbox.script_text().decode()
    assert script.startswith("#!/bin/sh\n") and 'sdist=$1 work=$2 jobs=$3 packages=$4' in script
    text = ("glibc 2.36\ncmake 3.25.1-1\nninja-build 1.11.1-2~deb12u1\ng++ 4:12.2.0-3\n")
    assert buildbox.parse_toolchain(text) == {"glibc": "2.36", "packages": {
        "cmake": "3.25.1-1", "ninja-build": "1.11.1-2~deb12u1", "g++": "4:12.2.0-3"}}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def box_build(cache: Path, codename: str, need: str) -> Path:
    """A box build in the cache's layout (buildbox.build_for_release): a real ELF needing GLIBC_<need>."""
    directory = cache / "llama" / "0.3.36" / f"cpu-{codename}"
    binary = elf_needing_glibc(directory / "bin" / "llama-server", need)
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()
    (directory / "manifest.json").write_text(json.dumps({"release": codename, "files": {"bin/llama-server": digest}}))
    return directory


def test_the_release_build_s_files_come_from_its_cache_and_are_checked(cache: Path) -> None:
    directory = box_build(cache, "bookworm", "2.34")
    choice = BuildChoice("cpu", release="bookworm")
    assert choice.describe() == "CPU build for Debian bookworm"
    files = server_files(choice, {}, "/usr/local/bin/llama-server")
    assert [(f.src, f.dest) for f in files] == [(str(directory / "bin" / "llama-server"),
                                                 "/usr/local/bin/llama-server")]
    assert glibc_needed(files) == ((2, 34), "llama-server")
    assert glibc_refusal(choice, glibc_needed(files), "glibc 2.36", "@lxd/lw-node1") is None
    # damaged after its build: never pushed
    (directory / "bin" / "llama-server").write_bytes(b"\x7fELF torn")
    with pytest.raises(DeployError, match=r"^llamacpp_build: .* the cache is damaged; remove .*cpu-bookworm and "
                                          r"build it again \(nothing was changed\)$"):
        server_files(choice, {}, "/usr/local/bin/llama-server")
    with pytest.raises(DeployError, match=r"^llamacpp_build: cpu: the CPU build for Debian trixie is not built on "
                                          r"this machine yet \(.*cpu-trixie\); build it once in the lab's build box "
                                          r"with `labwright build llamacpp --release trixie` \(nothing was changed\)$"):
        server_files(BuildChoice("cpu", release="trixie"), {}, "/usr/local/bin/llama-server")


def test_without_a_lab_daemon_the_refusal_names_the_command_that_builds_it() -> None:
    line = glibc_refusal(BuildChoice("cpu"), ((2, 38), "llama-server"), "glibc 2.36", "@ssh/old", release="bookworm")
    assert line == (
        "llamacpp_build: cpu: llama-server (CPU build) needs glibc 2.38 (GLIBC_2.38, read from its ELF), @ssh/old "
        "has glibc 2.36: it would not start there; build it for the guest's release in the lab's build box with "
        "`labwright build llamacpp --release bookworm` on this machine (a guest reached through @lxd/@incus gets it "
        "built by the deploy itself), or give the guest a newer image (nothing was changed)")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_build_release_dry_says_where_and_builds_nothing(capsys, cache: Path) -> None:
    code, out, err = run(capsys, "build", "llamacpp", "--release", "Bookworm", "--dry", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {"binary": f"{cache}/llama/0.3.36/cpu-bookworm/bin/llama-server", "cached": False,
                               "built": False, "dry": True, "cuda": None, "architectures": [], "vulkan": False,
                               "release": "bookworm"}
    assert not cache.exists()
    box_build(cache, "bookworm", "2.34")
    code, out, err = run(capsys, "build", "llamacpp", "--release", "bookworm")  # cached: no daemon asked
    assert (code, out) == (0, f"{cache}/llama/0.3.36/cpu-bookworm/bin/llama-server\n")


@pytest.mark.parametrize(("args", "message"), [
    (("--release", "sid"), "labwright: error: --release 'sid': the lab has no image of that Debian release; give one "
                           "of bookworm, trixie (labwright/data/lab-image*.toml)"),
    (("--release", "bookworm", "--vulkan"), "labwright: error: --release bookworm: a build box makes the CPU build "
                                            "only"),
    (("--release", "trixie", "--arch", "8.6"), "labwright: error: --release trixie: a build box makes the CPU build "
                                               "only"),
])
def test_build_release_bad_input_is_one_line_exit_2(capsys, cache: Path, args: tuple, message: str) -> None:
    code, out, err = run(capsys, "build", "llamacpp", *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith(message), err
    assert not cache.exists()
