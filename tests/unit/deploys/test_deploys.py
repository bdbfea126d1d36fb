"""labwright.deploys: every deploy is a pyinfra @deploy function, and deploys/*.py are shims that call it."""

from __future__ import annotations

import ast
import importlib
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
NAMES = sorted(p.stem for p in (REPO / "deploys").glob("*.py"))


def test_every_shim_has_a_packaged_deploy():
    shared = ("__init__", "common", "engine_common")  # helpers of the deploys, no deploy of their own
    packaged = sorted(p.stem for p in (REPO / "src/labwright/deploys").glob("*.py") if p.stem not in shared)
    assert packaged == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_deploy_function_is_wrapped_by_pyinfra(name):
    module = importlib.import_module(f"labwright.deploys.{name}")
    function = getattr(module, f"deploy_{name}")
    assert getattr(function, "_inner", None) is not None  # what pyinfra.api.deploy's wrapper leaves
    assert function._inner.deploy_name and function.__doc__


ENGINE_DEPLOYS = ("llamacpp", "tabbyapi", "vllm")  # their shims deploy only on the inventory's hosts of that engine


@pytest.mark.parametrize("name", NAMES)
def test_shim_is_docstring_import_and_call(name):
    tree = ast.parse((REPO / "deploys" / f"{name}.py").read_text())
    docstring, *imports, called = tree.body
    assert isinstance(docstring, ast.Expr) and "pyinfra" in ast.literal_eval(docstring.value)
    imported = imports[-1]
    assert isinstance(imported, ast.ImportFrom) and imported.module == f"labwright.deploys.{name}"
    assert [alias.name for alias in imported.names] == [f"deploy_{name}"]
    if name in ENGINE_DEPLOYS:
        assert ast.unparse(imports[0]) == "from labwright.deploys import engine_host"
        assert ast.unparse(called) == f"if engine_host('{name}'):\n    deploy_{name}()"
    else:
        assert len(imports) == 1
        assert isinstance(called, ast.Expr) and ast.unparse(called) == f"deploy_{name}()"


INVENTORY = """
nodes = [("@local", {"pve_gpu": None})]
"""


@pytest.mark.parametrize("data, deployed", [
    ({"engine": "tabbyapi"}, True), ({"engine": "llamacpp"}, False), ({}, False), ({"tabbyapi_port": 5001}, True),
    ({"tabbyapi": {"port": 5001}}, True), ({"engine": "llamacpp", "tabbyapi_port": 5001}, False),
])
def test_engine_host_picks_the_inventory_hosts_of_that_engine(data, deployed):
    from pyinfra.api import Config, Inventory, State
    from pyinfra.context import ctx_host, ctx_state

    from labwright.deploys import engine_host

    inventory = Inventory((["@local"], data))
    state = State(inventory, Config())
    with ctx_state.use(state), ctx_host.use(inventory.get_host("@local")):
        assert engine_host("tabbyapi") is deployed


def test_an_inventory_with_other_hosts_deploys_tabbyapi_on_none_of_them(cli_env, tmp_path):
    """`pyinfra inventories/lab.py deploys/tabbyapi.py` must leave a Proxmox node (no engine data) alone."""
    inventory = tmp_path / "inv.py"
    inventory.write_text(INVENTORY)
    proc = subprocess.run(["pyinfra", "-y", str(inventory), "deploys/tabbyapi.py"], capture_output=True, text=True,
                          env=cli_env, cwd=REPO, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "tabbyapi: not deployed here (no engine and no tabbyapi_* data)" in output
    assert "tabbyAPI |" not in output


def test_a_refusal_through_the_shim_is_one_line_before_any_operation(cli_env, tmp_path):
    proc = subprocess.run(["pyinfra", "-y", "@local", "deploys/llamacpp.py", "--data", "llamacpp_flash_attn=never",
                           "--data", f"llamacpp_binary_src={tmp_path}/none"],
                          capture_output=True, text=True, env=cli_env, cwd=REPO, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    lines = [line for line in output.splitlines() if "llamacpp_flash_attn: " in line]
    assert len(lines) == 1 and "'never' is not one of on, off, auto" in lines[0], output
    assert "Traceback" not in output and "Beginning operation run" not in output
