"""deploys/tabbyapi.py on a host without a running systemd: one line, never a traceback; with systemd, whatever
shape pyinfra's answers take, a clean plan.

``pyinfra -y --dry @lxd/llm1 deploys/tabbyapi.py`` on a container whose PID 1 is not systemd, or with no systemctl,
was ``AttributeError: 'NoneType' object has no attribute 'strip'``: the deploy read ``systemctl is-active`` through
pyinfra's ``server.Command`` fact, which is None when the command prints nothing (pyinfra 3.10.0
``pyinfra/api/facts.py`` 102-108 and 347-350: ``FactBase.default`` is None and stays the answer without stdout).
pyinfra's own ``SystemdStatus``/``SystemdEnabled`` answer ``{}`` there (``pyinfra/facts/systemd.py`` 60-64 with
api/facts.py 219-240, or a failed fact, 347-395). labwright.facts.systemd reads every one of these shapes.

The deploy runs through pyinfra's own API (``add_deploy`` on a ``State`` without change detection, as ``pyinfra -y``
prepares it), with ``host.get_fact`` answering per fact class; the one CLI run hides ``systemctl`` from PATH.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.deploy import add_deploy
from pyinfra.api.exceptions import DeployError

from labwright.deploys import engine_common
from labwright.deploys import tabbyapi as tabbyapi_deploy
from labwright.facts.systemd import SystemdUnits
from support.pinned_matrix import pinned_matrix

REPO = Path(__file__).resolve().parents[3]
# A wheelhouse on the guest: the plan gets no dependency lock made here (that would download the real stack).
DATA = {"tabbyapi_model_dir": "/srv/models", "tabbyapi_model_name": "Qwen3-8B-exl3", "tabbyapi_gpu": "off",
        "tabbyapi_wheelhouse": "/srv/wheels"}
#: What the deploy body reads while pyinfra prepares, beside the systemd answer under test.
ANSWERS = {"Directory": {"mode": 755}, "ReadableBy": True}


@pytest.fixture(scope="module", autouse=True)
def _pinned_matrix(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The default stack plans against a copy of the matrix with every row pinned (the shipped one refuses its
    GitHub-release rows without a sha256: docs/security.md, "Every download pinned")."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LABWRIGHT_MATRIX_DIR", str(pinned_matrix(tmp_path_factory.mktemp("pinned-matrix"))))
        yield


def plan(systemd: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[State, list[str], dict[str, Any]]:
    """The deploy prepared for ``@lxd/llm1`` with ``SystemdUnits`` answering ``systemd``: the state, the
    operations' names in order, and what the stack switch was told (a running service is restarted on it)."""
    inventory = Inventory((["@lxd/llm1"], DATA))
    state = State(inventory, Config(), check_for_changes=False)
    host = inventory.get_host("@lxd/llm1")

    def get_fact(fact: type, *args: Any, **kwargs: Any) -> Any:
        if fact is SystemdUnits:
            assert kwargs == {"units": "tabbyapi.service"}, kwargs
            return systemd
        return ANSWERS[fact.__name__] if fact.__name__ in ANSWERS else fact().default()

    host.get_fact = get_fact  # type: ignore[method-assign,assignment]
    switched: dict[str, Any] = {}
    original = engine_common.stack_ops.switch  # the switch the deploy calls (through engine_common)

    def switch(**kwargs: Any) -> Any:
        switched.update(kwargs)
        return original(**kwargs)

    monkeypatch.setattr(engine_common.stack_ops, "switch", switch)
    add_deploy(state, tabbyapi_deploy.deploy_tabbyapi, host=host)
    names = [name for op in state.get_op_order() for name in state.op_meta[op].names]
    return state, names, switched


@pytest.mark.parametrize("systemd", [
    None,  # a fact that answered nothing usable (a stub, a failed fact)
    {},  # not the shape SystemdUnits gives, but what pyinfra's own systemd facts default to
    {"init": "running", "units": {}},  # systemd runs; the unit was not asked about / not listed
    {"init": "running", "units": {"tabbyapi.service": "inactive"}},  # never installed: is-active says inactive
    {"init": "running", "units": {"other.service": "active"}},
    {"init": "running", "units": None},
], ids=["none", "empty-dict", "no-units", "unit-inactive", "other-unit-only", "units-none"])
def test_any_answer_short_of_active_plans_a_first_start(systemd: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _, names, switched = plan(systemd, monkeypatch)
    assert "tabbyAPI | Unit tabbyapi.service" in names and "tabbyAPI | tabbyapi enabled" in names
    assert names[-1] == "tabbyAPI | Release run lock /run/lock/labwright.lock"
    assert switched["service"] is None and switched["health"] is None  # nothing running to restart on the stack


def test_an_active_unit_is_restarted_on_the_new_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, switched = plan({"init": "running", "units": {"tabbyapi.service": "active"}}, monkeypatch)
    assert switched["service"] == "tabbyapi" and switched["health"] == "http://127.0.0.1:5000/health"


@pytest.mark.parametrize(("init", "why"), [
    ("offline", "PID 1 is not systemd: no /run/systemd/system"),
    ("absent", "no systemctl"),
])
def test_no_running_systemd_is_one_line_before_any_change(init: str, why: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DeployError) as refused:
        plan({"init": init, "units": {}}, monkeypatch)
    message = str(refused.value)
    assert message == (f"@lxd/llm1: systemd is not running there ({why}), and tabbyAPI runs as the systemd unit "
                       "tabbyapi.service; deploy to a host or system container booted with systemd (an LXD, "
                       "Incus or Proxmox container of a stock image is; an application container is not) (nothing was "
                       "changed)")


def test_pyinfra_dry_run_without_systemctl_is_one_line() -> None:
    """Through pyinfra itself (`-y --dry @local`), ``systemctl`` hidden from PATH: one line, no traceback."""
    pyinfra = Path(sys.executable).parent / "pyinfra"
    # World-readable (pytest's tmp_path is not): the model check runs `test -r` as the service user, from this PATH.
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        root.chmod(0o755)
        (root / "models" / "M").mkdir(parents=True, mode=0o755)
        (root / "bin").mkdir(mode=0o755)
        system = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        for directory in [*os.environ.get("PATH", "").split(os.pathsep), *system]:
            for tool in Path(directory).glob("*") if directory and Path(directory).is_dir() else ():
                link = root / "bin" / tool.name
                if tool.name != "systemctl" and not link.exists() and os.access(tool, os.X_OK):
                    link.symlink_to(tool)
        result = subprocess.run(
            [str(pyinfra), "-y", "--dry", "@local", "deploys/tabbyapi.py", "--data",
             f"tabbyapi_model_dir={root / 'models'}", "--data", "tabbyapi_model_name=M", "--data", "tabbyapi_gpu=off"],
            cwd=REPO, capture_output=True, text=True, timeout=120, env={**os.environ, "PATH": str(root / "bin")})
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output and "AttributeError" not in output, output
    lines = [line for line in output.splitlines() if "systemd is not running there (no systemctl)" in line]
    assert len(lines) == 1 and "tabbyAPI runs as the systemd unit tabbyapi.service" in lines[0], output
