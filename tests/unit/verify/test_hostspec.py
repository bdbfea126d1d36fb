"""`labwright verify --hosts` takes pyinfra's host names (translated to testinfra's before pytest starts; a bad one is
one line, exit 2, nothing run) and `--json` reports each test's outcome and the totals.

The @pct backend runs for real through ``sh``: ``ssh`` and ``pct`` are stand-ins on PATH (written here) that run the
command on this machine as a node's ``pct exec VMID --`` would run it in the container."""

from __future__ import annotations

import json
import os
import sys

import pytest

from labwright.cli import main
from labwright.errors import BadInput
from labwright.verify.hostspec import register_pct_backend, translate_host, translate_hosts
from support.cli_child import run_cli


@pytest.mark.parametrize("name, spec", [
    ("@lxd/lw-node1", "lxc://lw-node1"),
    ("@lxd/remote1:web", "lxc://remote1:web"),
    ("@incus/lw-node1", "incus://lw-node1"),
    ("@incus/remote1:web", "incus://remote1:web"),
    ("@pct/pve1/101", "pct://pve1?container=101"),
    ("@ssh/llm1", "ssh://llm1"),
    ("@ssh/root@10.99.0.53:2222", "ssh://root@10.99.0.53:2222"),
    ("@local", "local://"),
    ("lxc://lw-node1", "lxc://lw-node1"),  # testinfra's own, as before
    ("ssh://root@llm1", "ssh://root@llm1"),
    ("llm1", "llm1"),
])
def test_pyinfra_names_become_testinfra_specs(name, spec):
    assert translate_host(name) == spec


def test_several_hosts_are_comma_separated():
    assert translate_hosts("@lxd/a, @pct/pve1/101,ssh://b") == "lxc://a,pct://pve1?container=101,ssh://b"


@pytest.mark.parametrize("name, words", [
    ("@lxd/$(id)", "'$(id)' is not a valid container name"),
    ("@lxd/", "@lxd needs a container name"),
    ("@pct/pve1/5", "VMID '5' is not a Proxmox container id"),
    ("@pct/101", "expected @pct/NODE/VMID"),
    ("@ssh/a b", "'a b' is not a host ssh can reach"),
    ("@ssh/", "'' is not a host ssh can reach"),
    ("@incus/$(id)", "'$(id)' is not a valid container name"),
    ("@docker/x", "not a host name labwright verify knows"),
    ("", "an empty host name"),
])
def test_a_bad_name_is_refused(name, words):
    with pytest.raises(BadInput, match=None) as caught:
        translate_hosts(f"@lxd/ok,{name}")
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("as_json", [False, True])
def test_the_cli_refuses_a_bad_name_in_one_line_before_pytest_runs(as_json, capsys):
    code = main(["verify", "base", "--hosts=@lxd/a,@pct/pve1/7", *(["--json"] if as_json else []), "-q"])
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1
    assert err == ("labwright: error: --hosts: @pct/pve1/7: VMID '7' is not a Proxmox container id (an integer from "
                   "100 to 999999999)\n")
    if as_json:
        assert json.loads(out) == {"error": err.removeprefix("labwright: error: ").strip(), "exit_code": 2}
    else:
        assert out == ""


def test_json_lists_the_suites(capsys):
    from support.cli_docs import assert_documented

    assert main(["verify", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert_documented("verify", doc, 1)
    assert [s["name"] for s in doc["suites"]][:2] == ["base", "desktop"]
    assert main(["verify", "base", "--path", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["suites"][0]["path"].endswith("test_base.py")


def test_json_reports_each_test_and_the_totals(cli_env):
    from support.cli_docs import assert_documented

    # this machine as the host (@local): the timezone checks pass or fail by what it has; the document says which
    proc = run_cli(["verify", "base", "--hosts=@local", "--json", "-q", "-k", "timezone or localtime"], env=cli_env,
                   timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    assert_documented("verify", doc)
    assert (doc["suite"], doc["hosts"], doc["testinfra_hosts"]) == ("base", ["@local"], ["local://"])
    assert doc["exit_code"] == proc.returncode and doc["ok"] is (proc.returncode == 0)
    assert len(doc["tests"]) >= 2 and all(t["nodeid"].startswith("test_base.py::") for t in doc["tests"])
    assert {t["outcome"] for t in doc["tests"]} <= {"passed", "failed", "skipped", "error"}
    assert sum(doc["totals"].values()) == len(doc["tests"])
    assert doc["totals"]["failed"] == sum(t["outcome"] == "failed" for t in doc["tests"])
    assert all(t["reason"] for t in doc["tests"] if t["outcome"] != "passed")
    assert "passed" in proc.stderr or "failed" in proc.stderr  # pytest's own summary, on stderr


def test_pct_hosts_run_through_the_node(tmp_path, monkeypatch):
    """``pct://NODE?container=VMID``: each command is ``ssh NODE pct exec VMID -- /bin/sh -c CMD``, quoted so the
    container's shell gets exactly the command testinfra built."""
    log = tmp_path / "log"
    (tmp_path / "ssh").write_text(
        f"#!{sys.executable}\n"
        "import json, subprocess, sys\n"
        "args = sys.argv[1:]\n"
        "while args[0].startswith('-'):\n"
        "    args = args[2:] if args[0] in ('-o', '-i', '-F') else args[1:]\n"
        f"open({str(log)!r}, 'a').write(json.dumps(args) + '\\n')\n"
        "sys.exit(subprocess.run(['/bin/sh', '-c', args[1]]).returncode)\n")
    (tmp_path / "pct").write_text('#!/bin/sh\n[ "$1" = exec ] && [ "$2" = 101 ] && [ "$3" = -- ] || exit 9\n'
                                  'shift 3\nexec "$@"\n')
    for name in ("ssh", "pct"):
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    import testinfra

    register_pct_backend()
    host = testinfra.get_host("pct://pve1?container=101")
    assert host.backend.get_pytest_id() == "pct://pve1/101"
    done = host.run("printf '%%s|' \"$0\" %s; exit 3", "it's $(not run)")
    assert (done.rc, done.stdout) == (3, "/bin/sh|it's $(not run)|")
    assert host.file("/etc/hostname").exists
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[0][0] == "pve1" and calls[0][1].startswith("pct exec 101 -- /bin/sh -c ")


def test_incus_hosts_run_through_the_incus_client(tmp_path, monkeypatch):
    """``incus://NAME``: each command is ``incus exec NAME --mode=non-interactive -- /bin/sh -c CMD``, as testinfra's
    lxc backend runs ``lxc exec`` (testinfra/backend/lxc.py, pytest-testinfra 10.2.2), with the steady run's end mark
    (verify/conftest.py, steady_lxc_run) taken off. ``incus`` here is a stand-in on PATH that runs the command on
    this machine; the real client on the Incus lab is in tests/integration/test_lab_backends.py."""
    log = tmp_path / "log"
    (tmp_path / "incus").write_text(
        f"#!{sys.executable}\n"
        "import json, subprocess, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "assert sys.argv[1:5] == ['exec', 'web1', '--mode=non-interactive', '--'], sys.argv\n"
        "sys.exit(subprocess.run(sys.argv[5:]).returncode)\n")
    (tmp_path / "incus").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    import testinfra

    from labwright.verify.conftest import steady_lxc_run
    from labwright.verify.hostspec import IncusBackend

    register_pct_backend()
    host = testinfra.get_host(translate_host("@incus/web1"))
    assert host.backend.get_pytest_id() == "incus://web1"
    done = host.run("printf '%%s|' \"$0\" %s; echo oops >&2; exit 3", "it's $(not run)")
    assert (done.rc, done.stdout, done.stderr) == (3, "/bin/sh|it's $(not run)|", "oops\n")
    monkeypatch.setattr(IncusBackend, "run", steady_lxc_run)  # as the suites' conftest.py makes it
    steady = host.run("echo out; echo err >&2")
    assert (steady.rc, steady.stdout, steady.stderr) == (0, "out\n", "err\n")
    assert host.file("/etc/hostname").exists
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(call[:6] == ["exec", "web1", "--mode=non-interactive", "--", "/bin/sh", "-c"] for call in calls)
