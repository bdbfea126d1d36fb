"""The lab image's cached tarball is used only when it is the one built (docs/reliability.md class 26): its sha256
is recorded beside it, and one cut short, emptied or written over since is built again instead of being handed to
LXD's import (which failed on it, every `lab up`, until the user found the file). debootstrap is a stand-in that
makes a small tree (the real one is minutes and the network); tar, gzip and the packing are real."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labwright.errors import BadInput
from labwright.lab import image

DEBOOTSTRAP = """#!/bin/sh
# debootstrap [options] SUITE TARGET [MIRROR]: a tree with an os-release, counted
echo run >> "$CALLS"
for arg; do case "$arg" in -*) ;; *) set -- "$@" "$arg" ;; esac; shift; done
mkdir -p "$2/etc" && echo 'ID=debian' > "$2/etc/os-release"
echo "I: Unpacking base-files..."
"""


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "debootstrap").write_text(DEBOOTSTRAP)
    (bindir / "debootstrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LABWRIGHT_PROGRESS", "lines")
    return tmp_path / "calls"


def builds(calls: Path) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def build(recipe: image.ImageRecipe) -> Path:
    return image.build_image(recipe, mirror="http://127.0.0.1:9/debian", log=lambda line: None)


def test_a_built_tarball_is_reused_and_one_changed_since_is_built_again(stand_in: Path) -> None:
    recipe = image.load_recipe()
    tarball = build(recipe)
    assert builds(stand_in) == 1 and image.cached_image(recipe) == tarball
    assert image.tarball_record(tarball).read_text().strip() == __import__("hashlib").sha256(
        tarball.read_bytes()).hexdigest()
    assert build(recipe) == tarball and builds(stand_in) == 1  # reused
    whole = tarball.read_bytes()
    tarball.write_bytes(whole[: len(whole) // 2])  # cut short (a full disk, a copy stopped half-way)
    assert image.cached_image(recipe) is None
    assert build(recipe) == tarball and builds(stand_in) == 2
    with tarfile.open(tarball) as tar:  # what LXD gets is whole again
        assert "metadata.yaml" in tar.getnames()
    assert image.cached_image(recipe) == tarball


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.one_of(st.binary(max_size=64), st.sampled_from([b"", b"\n", b"0" * 64 + b"\n", b"x" * 2000])),
       cut=st.integers(min_value=1, max_value=1 << 16))
def test_junk_in_the_record_never_makes_a_damaged_tarball_taken(stand_in: Path, junk: bytes, cut: int) -> None:
    """Whatever the record holds: a whole tarball is taken (its record written again), one cut short never."""
    recipe = image.load_recipe()
    tarball = build(recipe)
    good = image.tarball_record(tarball).read_bytes()
    image.tarball_record(tarball).write_bytes(junk)
    assert image.cached_image(recipe) == tarball and image.tarball_record(tarball).read_bytes() == good
    image.tarball_record(tarball).write_bytes(junk)
    tarball.write_bytes(tarball.read_bytes()[:-cut])
    assert image.cached_image(recipe) is None


def test_a_tarball_of_an_earlier_labwright_without_a_record_is_adopted_when_whole(stand_in: Path) -> None:
    recipe = image.load_recipe()
    tarball = build(recipe)
    image.tarball_record(tarball).unlink()
    assert image.cached_image(recipe) == tarball  # reads whole, names this recipe: kept, record written
    assert image.tarball_record(tarball).is_file()
    image.tarball_record(tarball).unlink()
    tarball.write_bytes(tarball.read_bytes()[:-4096])
    assert image.cached_image(recipe) is None  # no record and cut short: built again
    assert build(recipe) == tarball and builds(stand_in) == 2


def test_something_that_is_no_file_in_its_place_is_one_line(stand_in: Path) -> None:
    recipe = image.load_recipe()
    image.cached_tarball(recipe).mkdir(parents=True)
    with pytest.raises(BadInput, match=r"is not a file \(the lab image's cache\); remove it and run again"):
        build(recipe)
    assert builds(stand_in) == 0
