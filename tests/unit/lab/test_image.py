"""The image recipe: its hash decides rebuilds; the mirror comes from the host's own apt config."""

from __future__ import annotations

import dataclasses

import pytest

from labwright.errors import BadInput
from labwright.lab.image import cached_tarball, host_debian_mirror, load_recipe


def test_packaged_recipe_is_bookworm_with_systemd_and_ssh():
    recipe = load_recipe()
    assert recipe.suite == "bookworm"
    assert {"systemd-sysv", "openssh-server", "ifupdown"} <= set(recipe.include)
    assert "iface eth0 inet dhcp" in recipe.files["/etc/network/interfaces"]
    assert recipe.alias == f"labwright/bookworm-{recipe.digest}"


def test_digest_is_stable_and_changes_with_the_recipe(tmp_path, monkeypatch):
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path))
    recipe = load_recipe()
    assert load_recipe().digest == recipe.digest
    changed = dataclasses.replace(recipe, include=(*recipe.include, "curl"))
    assert changed.digest != recipe.digest
    assert cached_tarball(changed) != cached_tarball(recipe)
    moved = dataclasses.replace(recipe, files={**recipe.files, "/etc/motd": "hi\n"})
    assert moved.digest != recipe.digest


def test_recipe_file_errors_are_bad_input(tmp_path):
    bad = tmp_path / "r.toml"
    bad.write_text("[image]\nname = 'x'\n")
    with pytest.raises(BadInput, match="r.toml"):
        load_recipe(bad)
    bad.write_bytes(b"[image]\nname = 'caf\xe9'\n")
    with pytest.raises(BadInput, match="r.toml is not UTF-8 text"):
        load_recipe(bad)


def test_mirror_from_deb822_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
    )
    assert host_debian_mirror(str(tmp_path)) == "http://mirror.example/debian"


def test_mirror_from_one_line_sources_and_ubuntu_hosts(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://m.example/debian bookworm main\n")
    assert host_debian_mirror(str(tmp_path)) == "http://m.example/debian"
    (tmp_path / "sources.list").write_text("deb http://archive.example/ubuntu noble main\n")
    # An Ubuntu archive has no bookworm: fall back to debootstrap's own default.
    assert host_debian_mirror(str(tmp_path)) is None


def test_abandoned_build_trees_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    import os

    from labwright.lab.image import cache_dir, remove_abandoned_builds

    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path))
    dead = cache_dir() / "labwright-image-999999999-abcd"  # above pid_max: no such process
    live = cache_dir() / f"labwright-image-{os.getpid()}-efgh"
    for work in (dead, live):
        (work / "rootfs" / "etc").mkdir(parents=True)
        (work / "rootfs" / "etc" / "hostname").write_text("x\n")
    assert remove_abandoned_builds(log=lambda _: None) == [dead]
    assert not dead.exists() and (live / "rootfs" / "etc" / "hostname").exists()


def test_a_failing_debootstrap_is_one_line_with_its_own_error_and_the_log_kept(tmp_path, monkeypatch, capfd):
    """Real debootstrap (scripts/setup installs it) against a mirror that does not exist: it fails at once on the
    Release file; the error names the step, debootstrap's own E: line and the log, progress went to stderr, and no
    half-built tree is left in the cache."""
    import shutil

    from labwright.errors import OperationFailed
    from labwright.lab.image import build_image

    if shutil.which("debootstrap") is None:
        pytest.fail("debootstrap is missing: scripts/setup installs it")
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LABWRIGHT_PROGRESS", "lines")
    with pytest.raises(OperationFailed) as failed:
        build_image(load_recipe(), mirror=f"file://{tmp_path}/no-mirror", log=lambda line: None)
    line = str(failed.value)
    assert line.startswith("debootstrap bookworm failed (exit ") and "\n" not in line
    assert "E: " in line and line.endswith("check the mirror and disk space")
    log = tmp_path / "cache" / "images" / "debootstrap.log"
    assert str(log) in line and "E: " in log.read_text()
    assert "debootstrap bookworm" in capfd.readouterr().err  # the progress line
    assert [p.name for p in (tmp_path / "cache" / "images").iterdir()] == ["debootstrap.log"]
