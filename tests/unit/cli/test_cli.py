"""The CLI's contract: --help everywhere, one-line errors, exit 2 for bad input."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from support.cli_child import run_cli

GROUPS = ["lab", "matrix", "stack", "guest", "tabbyapi", "kv", "probe", "bench", "cluster", "bios"]


def run(cli_env, *args, cwd=None):
    return run_cli(list(args), env=cli_env, cwd=cwd)


def test_top_level_help_lists_every_group(cli_env):
    proc = run(cli_env, "--help")
    assert proc.returncode == 0
    for group in GROUPS:
        assert group in proc.stdout


@pytest.mark.parametrize("args", [[g, "--help"] for g in GROUPS] + [
    ["lab", "up", "--help"], ["lab", "status", "--help"], ["lab", "down", "--help"]])
def test_help_on_every_level(cli_env, args):
    proc = run(cli_env, *args)
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout


def test_version(cli_env):
    proc = run(cli_env, "--version")
    assert proc.returncode == 0 and proc.stdout.startswith("labwright ")


def test_broken_inventory_is_one_line_exit_2(cli_env, tmp_path):
    inv = tmp_path / "inv.py"
    inv.write_text("lab = [\n")
    for command in (["lab", "up"], ["lab", "status"], ["lab", "down", "--yes"], ["lab", "up", "--dry"]):
        proc = run(cli_env, *command, "-i", str(inv))
        assert proc.returncode == 2, (command, proc.stderr)
        assert proc.stderr.count("\n") == 1
        assert proc.stderr.startswith("labwright: error: inventory ") and "fix the Python syntax" in proc.stderr


def test_missing_default_inventory_names_the_fix(cli_env, tmp_path):
    proc = run(cli_env, "lab", "status", cwd=tmp_path)
    assert proc.returncode == 2
    assert "inventories/local.py" in proc.stderr and "pass an existing file" in proc.stderr


def test_unknown_option_is_a_usage_error(cli_env):
    proc = run(cli_env, "lab", "up", "--frobnicate")
    assert proc.returncode == 2
    assert "No such option" in proc.stderr


def test_typer_exit_codes_reach_the_shell():
    import typer

    from labwright.cli import app, main

    @app.command("zz-exit-code-probe", hidden=True)
    def probe() -> None:
        raise typer.Exit(3)

    assert main(["zz-exit-code-probe"]) == 3


def _probe_command(name, body):
    from labwright.cli import app

    app.command(name, hidden=True)(body)
    return name


@pytest.mark.parametrize("raised, code, words", [
    (KeyboardInterrupt(), 130, "labwright: interrupted (Ctrl-C)"),
    (FileNotFoundError(2, "No such file or directory", "/srv/nope.yml"), 2, "/srv/nope.yml: no such file"),
    (OSError(28, "No space left on device", "/srv/venv"), 1, "/srv/venv: no space left on the device"),
    (UnicodeDecodeError("utf-8", b"ab\xff", 2, 3, "invalid start byte"),
     2, "not UTF-8 text (byte 0xff at offset 2)"),
    (SystemExit(0), 2, "cut short by sys.exit(0) in "),  # raised in this file: not labwright's, the user's
    (ZeroDivisionError("division by zero"), 1, "internal error: ZeroDivisionError: division by zero at test_cli.py:"),
])
def test_whatever_escapes_a_command_is_one_line(capsys, raised, code, words):
    from labwright.cli import main

    def body() -> None:
        if isinstance(raised, KeyboardInterrupt):  # a real Ctrl-C: the signal, as the terminal sends it
            os.kill(os.getpid(), signal.SIGINT)
        raise raised

    name = _probe_command(f"zz-escape-{type(raised).__name__.lower()}-{code}", body)
    assert main([name]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err
    assert "Traceback" not in err


def test_usage_errors_are_one_line(cli_env):
    for args, words in ((["lab", "up", "--frobnicate"], "No such option: --frobnicate"),
                        (["kv", "plan", "--context", "abc"], "'--context'"),
                        (["kv", "plan"], "Missing option '--config'"),
                        (["nope"], "No such command 'nope'")):
        proc = run(cli_env, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and words in proc.stderr and "--help" in proc.stderr, (args, proc.stderr)


def test_ctrl_c_while_a_command_waits_is_one_line_exit_130(cli_env):
    """A real SIGINT (what the terminal sends on Ctrl-C) to a labwright waiting on a server that never answers."""
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]
        proc = subprocess.Popen(["labwright", "bench", "llm", "--url", f"http://127.0.0.1:{port}/v1",
                                 "--contexts", "64", "--trials", "1", "--decode", "4", "--timeout", "600"],
                                env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            server.settimeout(120)
            conn, _ = server.accept()  # labwright is now inside the command, waiting for an answer
            with conn:
                proc.send_signal(signal.SIGINT)
                out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip().splitlines()[-1].startswith("labwright: interrupted"), err
    assert "Traceback" not in err and err.count("labwright: interrupted") == 1, err


def test_a_bare_group_prints_its_help_and_no_empty_error(cli_env):
    proc = run(cli_env, "lab")
    assert "Usage:" in proc.stdout and "labwright: error" not in proc.stderr, proc.stderr


def test_ctrl_c_while_the_cli_loads_is_one_line_exit_130():
    """SIGINT delivered while labwright's heavy imports load (here: the moment typer is imported)."""
    import sys

    code = (
        "import os, signal, sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'typer':\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "from labwright.cli import main\n"
        "sys.exit(main(['--version']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
    assert proc.stderr == "labwright: interrupted\n" and proc.stdout == ""


@pytest.mark.parametrize("args", [["--help"], ["guest", "--help"], ["matrix", "show"]])
def test_a_reader_that_left_early_is_no_error(cli_env, args):
    """`labwright ... | head`: the pipe's reader is gone before labwright writes (its read end is closed right after
    the start, long before the imports are done): no error line, no traceback, exit 141 as a shell's SIGPIPE."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(["labwright", *args], stdout=write_end, stderr=subprocess.PIPE, env=cli_env, text=True)
    os.close(write_end)
    os.close(read_end)
    _out, err = proc.communicate(timeout=120)
    assert err == "", err
    assert proc.returncode == 141


def test_verify_pytest_usage_errors_are_one_line(cli_env, tmp_path):
    # `verify` hands its arguments to pytest; pytest's usage block (exit 4) becomes one labwright line, exit 2.
    for args, words in ((["verify", "tabbyapi", "-i", "lab.py"], "unrecognized arguments: -i lab.py"),
                        (["verify", "base", "nosuch_test.py"], "file or directory not found: nosuch_test.py")):
        proc = run(cli_env, *args, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr == (f"labwright: error: verify {args[1]}: {words}; see `labwright verify {args[1]} --help` "
                               "(the suite's options) and --hosts\n"), proc.stderr


def test_verify_a_host_that_does_not_answer_is_one_line_before_any_test(cli_env, tmp_path):
    """CLI sweep at 2b91fd1: an unreachable host was ~1,450 lines of per-test errors; now the suite asks each host
    once (labwright.verify.hostspec.reach) and says it in one line, exit 1 (a closed port on this machine)."""
    proc = run(cli_env, "verify", "base", "--hosts", "@ssh/127.0.0.1:9", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ("labwright: error: verify base: --hosts ssh://127.0.0.1:9: cannot reach it (ssh: connect "
                           "to host 127.0.0.1 port 9: Connection refused); nothing was checked\n"), proc.stderr
    assert "passed" not in proc.stdout and "error" not in proc.stdout.lower(), proc.stdout[-500:]
