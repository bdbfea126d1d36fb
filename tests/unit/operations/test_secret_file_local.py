"""labwright.operations.secrets.secret_file for real, through the pyinfra CLI on @local: ``--dry --diff`` shows
neither the old nor the new secret (pyinfra's files.put, the control, shows its contents), and a real run writes the
file whole at its mode, leaves no staging directory, and changes nothing the second time."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

DEPLOY = """
import grp, os, pwd
from io import StringIO
from pyinfra.operations import files
from labwright.operations.secrets import secret_file

where = os.environ["LW_SECRET_DIR"]
user, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
secret_file(name="Secret file", content="TOKEN=NEW-SECRET-4f9a\\n", dest=f"{where}/secrets.env", user=user,
            group=group)
files.put(name="Control file", src=StringIO("CONTROL-VISIBLE\\n"), dest=f"{where}/plain.env")
"""


def pyinfra(cli_env: dict[str, str], where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    deploy = where / "deploy.py"
    deploy.write_text(DEPLOY)
    # --dry without -y: with -y pyinfra skips its change detection, the step that prints --diff.
    yes = [] if "--dry" in args else ["-y"]
    return subprocess.run([str(Path(sys.executable).parent / "pyinfra"), *yes, *args, "@local", str(deploy)],
                          capture_output=True, text=True, env={**cli_env, "LW_SECRET_DIR": str(where)},
                          cwd=where, timeout=120, stdin=subprocess.DEVNULL)


def test_diff_never_shows_a_secret_and_a_run_writes_it_whole(cli_env, tmp_path):
    where = tmp_path / "etc"
    where.mkdir()
    (where / "secrets.env").write_text("TOKEN=OLD-SECRET-77c1\n")
    (where / "secrets.env").chmod(0o600)
    (where / "plain.env").write_text("OLD-PLAIN\n")

    dry = pyinfra(cli_env, where, "--dry", "--diff")
    output = dry.stdout + dry.stderr
    assert dry.returncode == 0, output
    assert "CONTROL-VISIBLE" in output and "OLD-PLAIN" in output  # --diff is on: files.put shows its file
    assert "NEW-SECRET" not in output and "OLD-SECRET" not in output, output
    assert "secrets.env (it holds a secret: contents not shown)" in output
    assert (where / "secrets.env").read_text() == "TOKEN=OLD-SECRET-77c1\n"  # --dry changed nothing

    run = pyinfra(cli_env, where)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "NEW-SECRET" not in output
    assert (where / "secrets.env").read_text() == "TOKEN=NEW-SECRET-4f9a\n"
    assert stat.S_IMODE(os.stat(where / "secrets.env").st_mode) == 0o600
    assert sorted(p.name for p in where.iterdir()) == ["deploy.py", "plain.env", "secrets.env"]  # no stage left

    again = pyinfra(cli_env, where, "--diff")
    output = again.stdout + again.stderr
    assert again.returncode == 0, output
    assert "Will " not in output and "NEW-SECRET" not in output
    (where / "secrets.env").chmod(0o644)  # a loosened mode is put back without rewriting or showing the file
    fixed = pyinfra(cli_env, where, "--diff")
    assert fixed.returncode == 0 and "NEW-SECRET" not in fixed.stdout + fixed.stderr
    assert stat.S_IMODE(os.stat(where / "secrets.env").st_mode) == 0o600
