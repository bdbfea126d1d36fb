"""`labwright stack switch|rollback` and the guest-side bundle on bad input: exit 2, one line on stderr naming the
input and the fix, no traceback, nothing written (no root, no lock, no venv). `--dry` refuses exactly what the
real run refuses: it runs the same checks (switch.preflight).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from labwright.stacks.bundle import build_bundle
from support.stacks import StandinStacks, build_standin_stacks

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stacks(tmp_path_factory) -> StandinStacks:
    return build_standin_stacks(tmp_path_factory.mktemp("standin-bad"))


@pytest.fixture
def where(tmp_path) -> dict[str, Path]:
    (tmp_path / "app").mkdir()
    return {"venv": tmp_path / "app" / ".venv", "root": tmp_path / "new" / "stacks", "tmp": tmp_path}


@pytest.fixture
def labwright(stacks, cli_env, where):
    env = {**cli_env, "LABWRIGHT_MATRIX_DIR": str(stacks.matrix_dir),
           "LABWRIGHT_CACHE": str(where["tmp"] / "cache")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["labwright", "stack", *args], capture_output=True, text=True, env=env, timeout=300)

    return run


def assert_one_line(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def assert_nothing_written(where: dict[str, Path]) -> None:
    made = where["root"].parent
    assert not made.exists(), f"{made} was created: {list(made.rglob('*'))}"
    assert not os.path.lexists(where["venv"]), f"{where['venv']} was created"


# (extra arguments, what the one line must name: the input and the fix)
CASES = {
    "base-python not a Python": (["--base-python", "/bin/false"], ["--base-python /bin/false",
                                                                     "not a working Python interpreter"]),
    "unknown installer": (["--installer", "conda"], ["--installer 'conda'", "use one of auto, uv, pip"]),
    "missing wheelhouse": (["--wheelhouse", "/nonexistent/wheels"], ["/nonexistent/wheels does not exist",
                                                                      "drop --wheelhouse"]),
    "health timeout zero": (["--health-timeout", "0"], ["--health-timeout 0", "pass one like 60"]),
    "health timeout negative": (["--health-timeout", "-1"], ["--health-timeout -1", "pass one like 60"]),
    "health timeout nan": (["--health-timeout", "nan"], ["--health-timeout nan", "pass one like 60"]),
    "health timeout beyond a day": (["--health-timeout", "1e12"], ["--health-timeout 1e+12", "at most 86400"]),
    "health port out of range": (["--health", "http://127.0.0.1:70000/health"],
                                 ["--health 'http://127.0.0.1:70000/health'", "1 to 65535"]),
    "health and health-cmd together": (["--health", "http://127.0.0.1:5000/health", "--health-cmd", "true"],
                                       ["--health and --health-cmd both given", "pass one of them"]),
    "keep zero": (["--keep", "0"], ["--keep 0", "keep at least 1"]),
    "service not a unit name": (["--service", "tabby api"], ["--service 'tabby api'", "pass one like tabbyapi"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_switch_refuses_bad_input_alike_with_and_without_dry(labwright, stacks, where, case):
    extra, needles = CASES[case]
    args = ["switch", "--to", "standin-2.9", "--venv", str(where["venv"]), "--root", str(where["root"]), "--create"]
    if "--wheelhouse" not in extra:
        args += ["--wheelhouse", str(stacks.wheelhouse)]
    dry = labwright(*args, *extra, "--dry")
    line = assert_one_line(dry, *needles)
    assert_nothing_written(where)
    real = labwright(*args, *extra)
    assert assert_one_line(real, *needles) == line  # the same refusal, word for word
    assert_nothing_written(where)


def test_dry_refuses_a_missing_venv_as_the_real_run_does(labwright, stacks, where):
    args = ["switch", "--to", "standin-2.9", "--venv", str(where["venv"]), "--root", str(where["root"]),
            "--wheelhouse", str(stacks.wheelhouse)]
    for run in (labwright(*args, "--dry"), labwright(*args)):
        assert_one_line(run, f"--venv {where['venv']} does not exist", "--create")
        assert_nothing_written(where)


def test_rollback_with_a_new_root_leaves_no_root_behind(labwright, where):
    where["venv"].parent.joinpath(".venv").mkdir()
    (where["venv"] / "bin").mkdir()
    (where["venv"] / "pyvenv.cfg").write_text("home = /usr/bin\n")
    run = labwright("rollback", "--venv", str(where["venv"]), "--root", str(where["root"]))
    assert_one_line(run, f"--venv {where['venv']}: not a labwright-managed symlink", "labwright stack switch")
    assert not where["root"].parent.exists()


def test_a_venv_whose_pyvenv_cfg_is_not_text_is_no_traceback(labwright, stacks, where):
    (where["venv"] / "bin").mkdir(parents=True)
    (where["venv"] / "pyvenv.cfg").write_bytes(b"\xff\xfe\x00home = \x80\x81\n")
    run = labwright("switch", "--to", "standin-2.9", "--venv", str(where["venv"]), "--root", str(where["root"]),
                    "--wheelhouse", str(stacks.wheelhouse), "--dry")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert "dry run: nothing is changed" in run.stdout
    assert not where["root"].parent.exists()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return build_bundle(tmp_path_factory.mktemp("bundle"))


@pytest.mark.parametrize("content", [b"\xff\xfe{\x00}", b"GGUF\x03\x00\x00\x00\x80\x81\x82", b""])
def test_the_bundle_refuses_a_plan_that_is_not_utf8_json(where, bundle, content):
    plan = where["tmp"] / "plan.json"
    plan.write_bytes(content)
    run = subprocess.run([sys.executable, str(bundle), "switch", "--plan", str(plan)],
                         capture_output=True, text=True, timeout=120)
    line = assert_one_line(run, f"--plan {plan}")
    assert ("not UTF-8 text" in line) if content[:1] in (b"\xff", b"G") else ("not JSON" in line)
