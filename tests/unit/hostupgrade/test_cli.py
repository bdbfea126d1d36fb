"""`labwright host upgrade`: the refusals made before the LXD daemon is asked, one line each, exit 2."""

from __future__ import annotations

from pathlib import Path

from labwright.cli import main, register
from support.fake_nvidia import DRIVER_VERSION, VERSION_TEXT
from support.host_cli import on_tree


def run(capsys, *args: str) -> tuple[int, str, str]:
    register(["host"])
    code = main(["host", "upgrade", *args])
    out, err = capsys.readouterr()
    return code, out, err


def host_tree(root: Path) -> Path:
    (root / "etc").mkdir(parents=True)
    (root / "etc/hostname").write_text("lwnode1\n")
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(VERSION_TEXT.format(version=DRIVER_VERSION))
    return root


def test_a_node_that_is_not_this_host(tmp_path, capsys):
    with on_tree(host_tree(tmp_path)):
        code, out, err = run(capsys, "pve9")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("labwright: error: node 'pve9' is not this host (it answers to lwnode1, ")
    assert err.rstrip().endswith("run `labwright host upgrade` on the node itself with its name")


def test_a_real_host_without_the_driver_is_refused(tmp_path, capsys):
    """This machine has no NVIDIA driver: on "/" (this machine is the node) the upgrade stops once its inputs are
    read, before the daemon or the host is asked anything."""
    assert not Path("/proc/driver/nvidia/version").exists()
    (tmp_path / "NVIDIA-Linux-x86_64-550.54.15.run").write_text("#!/bin/sh\n")
    for args in (["--yes"], ["--dry"]):
        code, out, err = run(capsys, "localhost", "--repository", str(tmp_path), *args)
        assert code == 2 and out == "" and len(err.splitlines()) == 1
        assert err.startswith("labwright: error: this host has no NVIDIA driver loaded (no /proc/driver/nvidia/"
                              "version)"), err
    code, out, err = run(capsys, "localhost", "--resume")  # the state is what a resume needs, not a loaded driver
    assert code == 2 and err.startswith("labwright: error: node localhost: no upgrade to resume (/var/lib/labwright/"
                                        "host-upgrade.json does not exist)"), err


def test_the_node_is_this_machine_no_option_names_another(tmp_path, capsys):
    code, _, err = run(capsys, "lwnode1", "--host-root", str(tmp_path))
    assert code == 2 and "No such option: --host-root" in err


def test_a_node_without_the_driver_files_is_refused(tmp_path, capsys):
    root = tmp_path / "host"
    (root / "etc").mkdir(parents=True)
    (root / "etc/hostname").write_text("lwnode1\n")
    (tmp_path / "NVIDIA-Linux-x86_64-550.54.15.run").write_text("#!/bin/sh\n")
    with on_tree(root):
        code, out, err = run(capsys, "lwnode1", "--repository", str(tmp_path), "--dry")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"labwright: error: this host has no NVIDIA driver loaded (no {root}/proc/driver/nvidia/"
                          "version)"), err


def test_the_repository_is_checked_before_the_daemon_is_asked(tmp_path, capsys):
    root = host_tree(tmp_path / "host")
    with on_tree(root):
        code, _, err = run(capsys, "lwnode1")
        repo = root / "var/cache/labwright/nvidia"
        assert code == 2 and err == (f"labwright: error: the repository {repo} (--repository DIR): not a directory; "
                                     "give the directory of NVIDIA-Linux-x86_64-VERSION.run installers\n")
        (tmp_path / "file").write_bytes(b"\xff\x00")
        code, _, err = run(capsys, "lwnode1", "--repository", str(tmp_path / "file"))
        assert code == 2 and err.startswith(f"labwright: error: --repository {tmp_path / 'file'}: not a directory")
        (tmp_path / "empty").mkdir()
        (tmp_path / "empty/NVIDIA-Linux-x86_64-latest.run").write_text("not a version")
        code, _, err = run(capsys, "lwnode1", "--repository", str(tmp_path / "empty"))
        assert code == 2 and err == (f"labwright: error: --repository {tmp_path / 'empty'}: no "
                                     "NVIDIA-Linux-x86_64-VERSION.run in it; add the installer of the driver to "
                                     "install\n")
