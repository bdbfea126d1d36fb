"""`labwright host upgrade`: the refusals made before the LXD daemon is asked, one line each, exit 2."""

from __future__ import annotations

from labwright.cli import main, register


def run(capsys, *args: str) -> tuple[int, str, str]:
    register(["host"])
    code = main(["host", "upgrade", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_node_that_is_not_this_host(tmp_path, capsys):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/hostname").write_text("lwnode1\n")
    code, out, err = run(capsys, "pve9", "--host-root", str(tmp_path))
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("labwright: error: node 'pve9' is not this host (it answers to lwnode1, ")
    assert err.rstrip().endswith("run `labwright host upgrade` on the node itself with its name")


def test_yes_on_the_real_host_is_refused(capsys):
    code, out, err = run(capsys, "localhost", "--yes")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "acts only on a host tree given with --host-root" in err


def test_host_root_must_be_a_directory(tmp_path, capsys):
    code, _, err = run(capsys, "lwnode1", "--host-root", str(tmp_path / "missing"))
    assert code == 2 and "not a directory" in err and len(err.splitlines()) == 1
