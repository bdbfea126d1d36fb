"""A pushed llama-server (CPU, CUDA, Vulkan or given) that needs a newer glibc than the guest's is refused in one line
before anything is installed: its requirement is read from the ELF files themselves (the highest ``GLIBC_x.y`` in
each ``.gnu.version_r``, labwright.matrix.elfsyms.version_needs), binary and the libraries shipped beside it.

The files are real ELF objects linked here by g++ (tests/support/elf_files.py). The bug this covers: a Debian 13
controller's build (glibc 2.41) deployed to a Debian 12 guest (glibc 2.36) failed there with ``GLIBC_2.38' not
found`` and the health check gave up after 120 s (docs/fresh-check.md, "Bugs it found").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pyinfra.api.exceptions import DeployError
from tests.support.elf_files import elf_needing_glibc
from tests.unit.operations.test_operations_data import run_case

from labwright.llamacpp.deploy_data import BuildChoice, ServerFile, glibc_needed, glibc_refusal
from labwright.matrix.elfsyms import BrokenElf, version_needs
from labwright.matrix.elfsyms import glibc_needed as newest_glibc


@pytest.fixture(scope="module")
def elves(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """llama-server needing GLIBC_2.38 and a library needing GLIBC_2.41, built once for the module."""
    where = tmp_path_factory.mktemp("elves")
    elf_needing_glibc(where / "llama-server", "2.38")
    elf_needing_glibc(where / "libggml-cuda.so", "2.41", shared=True)
    return where


def test_the_need_is_read_from_the_version_needs_section(elves: Path) -> None:
    needs = version_needs(elves / "llama-server")
    assert "GLIBC_2.38" in needs["libdl.so.2"] and "libc.so.6" in needs
    assert newest_glibc(needs) == (2, 38)
    # readelf agrees where binutils is installed (it is where g++ is)
    shown = subprocess.run(["readelf", "-V", str(elves / "llama-server")], capture_output=True, text=True).stdout
    assert "GLIBC_2.38" in shown
    # a real system binary: the interpreter running this test needs some glibc, none newer than this machine's
    assert newest_glibc(version_needs(Path(sys.executable).resolve())) is not None


def test_a_file_that_is_not_elf_needs_nothing_and_a_truncated_one_is_named(tmp_path: Path, elves: Path) -> None:
    script = tmp_path / "llama-server"
    script.write_text("#!/bin/sh\nexec true\n")
    assert version_needs(script) == {} and newest_glibc({}) is None
    torn = tmp_path / "torn"
    torn.write_bytes((elves / "llama-server").read_bytes()[:200])
    with pytest.raises(BrokenElf, match=rf"^{torn}: "):
        version_needs(torn)
    with pytest.raises(DeployError, match=r"build it again \(nothing was changed\)$"):
        glibc_needed([ServerFile(str(torn), "/usr/local/bin/llama-server", "")])


def test_the_newest_need_over_the_binary_and_its_libraries_names_the_file(elves: Path) -> None:
    files = [ServerFile(str(elves / "llama-server"), "/usr/local/bin/llama-server", ""),
             ServerFile(str(elves / "libggml-cuda.so"), "/usr/local/lib/llama-server/libggml-cuda.so", "")]
    assert glibc_needed(files) == ((2, 41), "libggml-cuda.so")
    assert glibc_needed(files[:1]) == ((2, 38), "llama-server")


def test_each_build_is_refused_in_one_line_naming_need_guest_and_fix(elves: Path) -> None:
    needed = glibc_needed([ServerFile(str(elves / "llama-server"), "/usr/local/bin/llama-server", "")])
    cpu = glibc_refusal(BuildChoice("cpu"), needed, "glibc 2.36", "@lxd/lw-old")
    assert cpu == (
        "llamacpp_build: cpu: llama-server (CPU build) needs glibc 2.38 (GLIBC_2.38, read from its ELF), "
        "@lxd/lw-old has glibc 2.36: it would not start there; build and deploy it from a machine of the guest's "
        "release (glibc 2.36 or older) (`labwright build llamacpp` there), or give the guest a newer image (lab "
        "image data/lab-image-trixie.toml, or upgrade it) (nothing was changed)")
    cuda = glibc_refusal(BuildChoice("cuda", ("86",), ("8.6",)), needed, "glibc 2.36", "g")
    assert cuda is not None and cuda.startswith("llamacpp_build: cuda: llama-server (CUDA ") and "\n" not in cuda
    given = glibc_refusal(BuildChoice("given"), needed, "glibc 2.36", "g")
    assert given is not None and given.startswith("llamacpp_binary_src: llama-server (given binary) needs glibc 2.38")
    assert "built on a machine of the guest's release (glibc 2.36 or older)" in given
    for kind in ("cpu", "given", "vulkan"):
        assert glibc_refusal(BuildChoice(kind), needed, "glibc 2.38", "g") is None
        assert glibc_refusal(BuildChoice(kind), needed, "glibc 2.41", "g") is None
        assert glibc_refusal(BuildChoice(kind), None, "glibc 2.17", "g") is None  # a script, a static binary


def test_the_operation_pushes_nothing_to_an_older_guest(tmp_path: Path, elves: Path) -> None:
    """llamacpp.server_binary reads the GlibcVersion fact only when a file needs glibc, and refuses before any
    upload (tests/unit/operations' data harness, one case written here because the ELF is built here)."""
    case = tmp_path / "llamacpp.server_binary" / "older_guest.json"
    case.parent.mkdir()
    case.write_text(json.dumps({
        "kwargs": {"binary": "/usr/local/bin/llama-server", "binary_src": str(elves / "llama-server")},
        "facts": {"labwright.nvidia.NvidiaGpus": {"": []},
                  "labwright.llamacpp.GlibcVersion": {"": "glibc 2.36"}},
        "exception": {"name": "OperationError", "message": (
            "llamacpp_binary_src: llama-server (given binary) needs glibc 2.38 (GLIBC_2.38, read from its ELF), "
            "testhost has glibc 2.36: it would not start there; give a llama-server built on a machine of the "
            "guest's release (glibc 2.36 or older), or give the guest a newer image (lab image "
            "data/lab-image-trixie.toml, or upgrade it) (nothing was changed)")}}))
    run_case(case)
