"""labwright.testing.pyinfra_output against real ``pyinfra --json`` runs on @local, and one recorded on the lab."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from labwright.testing.pyinfra_output import (
    DeployRun,
    Totals,
    UnreadableResult,
    pyinfra_command,
    pyinfra_totals,
    run_pyinfra,
    tool_env,
)

DATA = Path(__file__).resolve().parent / "data"

# One operation that changes every time, one that changes once (then no-op), one that is always a no-op, one that
# fails with _ignore_errors (pyinfra counts it under Error and carries on, so the run still prints its result).
DEPLOY = """\
from io import StringIO
from pyinfra.operations import files, server
server.shell(name="Write a stamp", commands=["date +%s%N > {tmp}/stamp"])
files.put(name="Put the config", src=StringIO("answer = 42\\n"), dest="{tmp}/app.conf")
files.directory(name="Keep the directory", path="{tmp}")
server.shell(name="Fail but carry on", commands=["echo broken-on-purpose >&2; exit 3"], _ignore_errors=True)
"""

FAILING = """\
from pyinfra.operations import server
server.shell(name="Works", commands=["true"])
server.shell(name="Fails here", commands=["echo the-real-reason >&2; exit 3"])
server.shell(name="Never runs", commands=["touch {tmp}/never"])
"""


def write_deploy(tmp_path: Path, text: str, name: str = "deploy.py") -> str:
    path = tmp_path / name
    path.write_text(text.format(tmp=tmp_path))
    return str(path)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DeployRun, DeployRun]:
    tmp = tmp_path_factory.mktemp("pyinfra-json")
    deploy = write_deploy(tmp, DEPLOY)
    first = run_pyinfra("@local", deploy, cwd=tmp, timeout=300)
    second = run_pyinfra("@local", deploy, cwd=tmp, timeout=300)
    return tmp, first, second


def test_a_real_run_reads_changed_no_change_and_error_per_operation(two_runs) -> None:
    tmp, first, _ = two_runs
    assert first.rc == 0, first.output
    assert (tmp / "app.conf").read_text() == "answer = 42\n"
    assert first.totals == Totals(operations=4, success=2, error=1, no_change=1)
    assert first.totals.changed == 2
    result = first.result
    assert [op.name for op in result.operations or ()] == [
        "Write a stamp", "Put the config", "Keep the directory", "Fail but carry on"]
    assert first.operation("Write a stamp").changed == ("@local",)
    assert first.operation("Put the config").changed == ("@local",)
    assert first.operation("Keep the directory").no_change == ("@local",)
    failed = first.operation("Fail but carry on")
    assert (failed.error, failed.success, failed.no_change, failed.hosts) == (("@local",), (), (), 1)
    assert result.failed_hosts == () and not result.dry


def test_a_second_run_changes_only_what_always_changes(two_runs) -> None:
    _, _, second = two_runs
    assert second.rc == 0, second.output
    assert second.totals == Totals(operations=4, success=1, error=1, no_change=2)
    assert second.operation("Put the config").no_change == ("@local",)
    assert second.operation("Write a stamp").changed == ("@local",)


def test_the_human_log_stays_for_failure_messages_without_the_json_line(two_runs) -> None:
    _, first, _ = two_runs
    assert "--> Starting operation: Put the config" in first.output
    assert "broken-on-purpose" in first.output  # the failing command's stderr, from pyinfra's log
    assert first.result_json is not None and first.result_json.startswith('{"plan"')
    assert '{"plan"' not in first.output and "Grand total" not in first.output
    # ... and it ends with the outcome from the JSON, as the results table used to.
    assert first.output.rstrip().endswith("totals: 2 changed, 1 error, 1 no change (4 operation-hosts)")
    assert "    Fail but carry on: ERROR on @local" in first.output


def test_a_run_where_every_host_fails_says_what_pyinfra_printed(tmp_path: Path) -> None:
    run = run_pyinfra("@local", write_deploy(tmp_path, FAILING), cwd=tmp_path, timeout=300)
    assert run.rc == 1 and not (tmp_path / "never").exists()
    assert "the-real-reason" in run.output
    with pytest.raises(UnreadableResult) as caught:
        _ = run.totals
    message = str(caught.value)
    assert message.startswith("no pyinfra --json result (exit 1): every host failed, so pyinfra stopped")
    assert "No hosts remaining!" in message and "the-real-reason" in message


def test_a_dry_run_has_a_plan_and_changes_nothing(tmp_path: Path) -> None:
    run = run_pyinfra("@local", write_deploy(tmp_path, DEPLOY), cwd=tmp_path, args=("--dry",), timeout=300)
    assert run.rc == 0, run.output
    assert not (tmp_path / "app.conf").exists() and not (tmp_path / "stamp").exists()
    result = run.result
    assert result.dry and result.operations is None
    planned = {op.name: op.hosts_with_change for op in result.plan}
    assert planned == {"Write a stamp": ("@local",), "Put the config": ("@local",), "Keep the directory": (),
                       "Fail but carry on": ("@local",)}
    with pytest.raises(UnreadableResult, match=r"executed nothing \(--dry, or no -y\): it has a plan, no totals"):
        _ = run.totals
    assert "would change on @local" in run.output


def test_pyinfra_totals_reads_a_json_run_made_by_hand_and_refuses_the_screen(tmp_path: Path) -> None:
    deploy = write_deploy(tmp_path, DEPLOY)
    env = tool_env()
    by_hand = subprocess.run(pyinfra_command("@local", deploy), cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
    assert by_hand.returncode == 0, by_hand.stderr
    assert pyinfra_totals(by_hand.stdout) == Totals(4, 2, 1, 1)
    assert pyinfra_totals(by_hand.stdout + by_hand.stderr) == Totals(4, 2, 1, 1)  # the log around it is skipped
    screen = subprocess.run([*pyinfra_command("@local", deploy)[:1], "-y", "@local", deploy], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=300)
    assert screen.returncode == 0 and "Grand total" in screen.stderr
    with pytest.raises(UnreadableResult, match=r"this is pyinfra's screen output: run pyinfra with --json"):
        pyinfra_totals(screen.stdout + screen.stderr)


def test_a_deploy_that_prints_on_stdout_keeps_its_lines_and_the_result(tmp_path: Path) -> None:
    deploy = write_deploy(tmp_path, 'print("hello from the deploy")\n' + DEPLOY)
    run = run_pyinfra("@local", deploy, cwd=tmp_path, timeout=300)
    assert run.rc == 0 and run.totals.changed == 2, run.output
    assert "hello from the deploy" in run.output
    assert pyinfra_totals(run) == run.totals  # a DeployRun itself, as callers of the old API may pass
    with pytest.raises(UnreadableResult, match=r"this is a DeployRun's output, whose --json line was taken out: "
                                               r"read run.totals / run.result"):
        pyinfra_totals(run.output)


def test_the_recorded_lab_run_reads_per_host_with_one_failed_host() -> None:
    """Two lab containers through @lxd at once; the second had /etc/lw-fail (record_lab_run.py recorded it)."""
    run = DeployRun(1, (DATA / "lab_two_hosts.json").read_text() + (DATA / "lab_two_hosts.log").read_text(), 3.6)
    result = run.result
    good, bad = "@lxd/lwjson-24731f", "@lxd/lwjson-cee905"
    assert result.failed_hosts == (bad,)
    assert result.operation("Put the motd").changed == (good, bad)
    assert result.operation("Keep /srv").no_change == (good, bad)
    check = result.operation("/etc/lw-fail")  # the one name containing it
    assert (check.success, check.error) == ((good,), (bad,))
    # pyinfra lists a host it dropped under Error for every later operation (it never ran there).
    after = result.operation("After the failure")
    assert (after.hosts, after.success, after.error) == (2, (good,), (bad,))
    assert run.totals == Totals(operations=8, success=4, error=2, no_change=2)
    # The JSON agrees with pyinfra's own log of the same run.
    assert f"[{bad}] Error: executed 0 commands" in run.output
    assert f"failed hosts: {bad}" in run.output


def test_an_unknown_or_ambiguous_operation_name_lists_what_ran(two_runs) -> None:
    _, first, _ = two_runs
    with pytest.raises(UnreadableResult, match=r"no operation named 'Reload ssh' in this pyinfra run; it ran: "
                                               r"\['Write a stamp', 'Put the config'"):
        first.operation("Reload ssh")
    recorded = (DATA / "lab_two_hosts.json").read_text().replace("Keep /srv", "Put /srv")
    with pytest.raises(UnreadableResult, match=r"^2 operations named 'Put' in this pyinfra run"):
        DeployRun(1, recorded, 1.0).operation("Put")


def test_an_operation_inside_a_deploy_function_is_found_by_its_own_name(tmp_path: Path) -> None:
    """pyinfra names the operations of a @deploy function "DEPLOY NAME | operation name"."""
    deploy = write_deploy(tmp_path, (
        "from pyinfra.api import deploy\n"
        "from pyinfra.operations import files, server\n"
        "@deploy('my app')\n"
        "def my_app():\n"
        "    server.shell(name='health: /health then /v1/models', commands=['true'])\n"
        "    files.directory(name='health: /health then /v1/models (no-op twin)', path='{tmp}')\n"
        "my_app()\n"))
    run = run_pyinfra("@local", deploy, cwd=tmp_path, timeout=300)
    assert run.rc == 0, run.output
    health = run.operation("health: /health then /v1/models")  # exact after the prefix, although two contain it
    assert (health.name, health.success) == ("my app | health: /health then /v1/models", ("@local",))
    assert run.operation("no-op twin").no_change == ("@local",)


@pytest.mark.parametrize(("text", "says"), [
    ("", r"no pyinfra --json result: pyinfra printed nothing"),
    ("--> Loading config...\n--> pyinfra error: No hosts remaining!\n",
     r"every host failed, so pyinfra stopped before printing any result; it printed:\n--> Loading config"),
    ('--> Loading config...\n{"plan": [{"op_hash": "ab", "na\n',
     r"pyinfra's --json line is not valid JSON \(Unterminated string.*\); it was: \{\"plan\": \[\{\"op_hash\""),
    ('{"plan": [], "results": {"operations": []}}\n',
     r"results has no 'totals' \(keys: \['operations'\]\); not the layout of pyinfra 3.10's print_run_json"),
    ('{"plan": [], "results": {"operations": [], "failed_hosts": [], '
     '"totals": {"hosts": "4", "success": 0, "error": 0, "no_change": 0}}}\n',
     r"results.totals.hosts is '4', not <class 'int'>"),
    ('{"plan": [{"op_hash": "ab", "name": "x", "names": ["x"], "args": []}], "results": null}\n',
     r"plan\[0\] has no 'hosts_with_change'"),
])
def test_an_unreadable_result_says_what_it_got(text: str, says: str) -> None:
    with pytest.raises(UnreadableResult, match=says):
        pyinfra_totals(text)


def test_a_deploy_run_made_the_old_way_keeps_working() -> None:
    """Callers build DeployRun(rc, stdout + stderr, seconds) from their own pyinfra --json run."""
    document = json.loads((DATA / "lab_two_hosts.json").read_text())
    document["results"]["failed_hosts"] = []
    run = DeployRun(0, json.dumps(document) + "\n--> Disconnecting from hosts...\n", 2.0)
    assert run.totals.changed == 4 and run.result.failed_hosts == ()
    assert run.output.startswith("--> Disconnecting from hosts...")
    without = DeployRun(2, "bad input: deploy_data: no key 'nope'\n", 0.5)
    assert without.result_json is None and without.output == "bad input: deploy_data: no key 'nope'\n"
    with pytest.raises(UnreadableResult, match=r"^no pyinfra --json result \(exit 2\): pyinfra stopped before"):
        _ = without.totals
