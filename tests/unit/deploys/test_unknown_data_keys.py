"""A typo in a deploy's host data is refused with the nearest key, never silently ignored (issue 16: the flat
``tabbyapi_cache_sise=65536`` was ignored while the dict form refused the same typo)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from pyinfra.api.exceptions import DeployError

from labwright.deploy_data import unknown_key_error
from labwright.errors import BadInput
from labwright.llamacpp.deploy_data import settings_from as llamacpp_settings
from labwright.tabbyapi.deploy_data import settings_from as tabbyapi_settings

REPO = Path(__file__).resolve().parents[3]


def test_tabbyapi_flat_typo_is_refused_like_the_dict_form() -> None:
    with pytest.raises(BadInput) as flat:
        tabbyapi_settings({"tabbyapi_model_name": "m", "tabbyapi_cache_sise": 65536})
    assert str(flat.value) == ("tabbyapi_cache_sise: unknown data key for this deploy (did you mean "
                               "tabbyapi_cache_size?); fix or remove it (nothing was changed)")
    with pytest.raises(BadInput) as nested:
        tabbyapi_settings({"tabbyapi": {"model_name": "m", "cache_sise": 65536}})
    assert "cache_sise" in str(nested.value)


def test_tabbyapi_known_flat_keys_pass() -> None:
    settings = tabbyapi_settings({"tabbyapi_model_name": "m", "tabbyapi_cache_size": 8192, "tabbyapi_port": 5001,
                                  "tabbyapi_ref": "v1", "stack": "C", "llamacpp_model": "/x.gguf"})
    assert (settings.cache_size, settings.port, settings.ref) == (8192, 5001, "v1")


def test_tabbyapi_stack_default_is_not_a_data_key() -> None:
    with pytest.raises(BadInput, match=r"^tabbyapi_default: unknown data key"):
        tabbyapi_settings({"tabbyapi_default": "C"})


def test_llamacpp_typo_names_the_nearest_flag() -> None:
    with pytest.raises(DeployError) as caught:
        llamacpp_settings({"llamacpp_model": "/srv/models/tiny.gguf", "llamacpp_ctx_sise": 8192})
    assert str(caught.value).startswith("llamacpp_ctx_sise: unknown data key for this deploy (did you mean "
                                        "llamacpp_ctx_size?)")


def test_llamacpp_ollama_keys_are_known() -> None:
    assert unknown_key_error({"llamacpp_ollama_keep_alive": "5m"}, "llamacpp",
                             ["ollama_keep_alive", "model"], "x") is None


def test_no_near_key_points_at_the_list() -> None:
    error = unknown_key_error({"kokoro_zzzzzzzz": 1}, "kokoro", ["port", "host"], "docs/kokoro.md")
    assert error is not None and str(error) == (
        "kokoro_zzzzzzzz: unknown data key for this deploy (the kokoro_* keys are listed in docs/kokoro.md); fix or "
        "remove it (nothing was changed)")


@pytest.mark.parametrize(("deploy", "typo", "nearest"), [
    ("deploys/kokoro.py", "kokoro_prot=8880", "kokoro_port"),
    ("deploys/litellm.py", "litellm_prot=4000", "litellm_port"),
    ("deploys/desktop.py", "desktop_usr=alice", "desktop_user"),
    ("deploys/tabbyapi.py", "tabbyapi_cache_sise=65536", "tabbyapi_cache_size"),
    ("deploys/guest.py", "guests_inventry=inventories/lab.py", "guests_inventory"),
    ("deploys/base.py", "admin_usr=ops", "admin_user"),
    ("deploys/stack.py", "stack_rolback=true", "stack_rollback"),
    ("deploys/cluster_rejoin.py", "cluster_inventroy=inventories/cluster.py", "cluster_inventory"),
])
def test_pyinfra_run_refuses_before_anything(deploy: str, typo: str, nearest: str, tmp_path: Path) -> None:
    """Through pyinfra itself (`--dry @local`): one line, no traceback, refused while pyinfra prepares."""
    pyinfra = Path(sys.executable).parent / "pyinfra"
    result = subprocess.run([str(pyinfra), "-y", "--dry", "@local", deploy, "--data", typo, "--data",
                             "engine=" + deploy.split("/")[1].removesuffix(".py")],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"{typo.split('=')[0]}: unknown data key for this deploy (did you mean {nearest}?)" in output, output
    assert "Traceback" not in output


@pytest.mark.parametrize(("data", "line"), [
    ("guests=nosuch", "inventories/local.py: no guest named nosuch (guests: "),
    ("guests_inventory=missing.py", "inventory missing.py: no such file; pass an existing file"),
])
def test_guest_deploy_bad_inventory_or_name_is_one_line(data: str, line: str) -> None:
    """deploys/guest.py's BadInput from the inventory loader reaches pyinfra as a DeployError: its one line, no
    traceback, nothing built."""
    pyinfra = Path(sys.executable).parent / "pyinfra"
    result = subprocess.run([str(pyinfra), "-y", "--dry", "@local", "deploys/guest.py", "--data", data],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "--> pyinfra error in " in output and line in output, output
    assert "Traceback" not in output


def test_llamacpp_runtime_packages_from_data_text_is_a_list_of_names(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_bytes(b"x")
    base = {"llamacpp_model": "/srv/m.gguf", "llamacpp_binary_src": str(binary)}
    settings = llamacpp_settings({**base, "llamacpp_runtime_packages": "libgomp1, curl"})
    assert settings.runtime_packages == ["libgomp1", "curl"]   # was ['l', 'i', 'b', ...]
    with pytest.raises(DeployError, match=r"^llamacpp_runtime_packages: 'Bad;rm' is not a Debian package name"):
        llamacpp_settings({**base, "llamacpp_runtime_packages": "Bad;rm"})


@pytest.mark.parametrize("item", ["labwright_lock_wait=abc", "labwright_lock_wait=-1", "labwright_lock_lease=x"])
def test_bad_lock_settings_are_one_line_before_anything(item: str) -> None:
    pyinfra = Path(sys.executable).parent / "pyinfra"
    result = subprocess.run([str(pyinfra), "-y", "--dry", "@local", "deploys/base.py", "--data", item],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    key, value = item.split("=")
    shown = value if value.lstrip("-").isdigit() else repr(value)   # pyinfra's --data makes -1 an int
    assert result.returncode != 0 and f"{key}: {shown} is not a number of seconds (0 or more)" in output, output
    assert "Traceback" not in output


# --- deploys whose keys carry no prefix: a misspelt key is refused, the host's other data is left alone ----------

def _unprefixed_deploys() -> dict[str, tuple[list[str], object]]:
    """Each unprefixed deploy's keys and the function that reads its data (raising on a misspelt key)."""
    from labwright.base.deploy_data import DEFAULTS as BASE
    from labwright.base.deploy_data import settings_from as base_settings
    from labwright.deploy_data import refuse_misspelt_keys
    from labwright.stacks.deploy_data import data_schema
    from labwright.stacks.deploy_data import settings as stack_settings

    stack = [field.alias or name for name, field in data_schema().model_fields.items()]
    cluster = ["cluster_inventory", "node", "lead"]
    return {"base": (list(BASE), base_settings), "stack": (stack, stack_settings),
            "cluster_rejoin": (cluster, lambda data: refuse_misspelt_keys(data, cluster, "docs/cluster.md"))}


DEPLOYS = _unprefixed_deploys()


def _edits(draw, key: str) -> str:
    """One letter dropped, added, changed, or two neighbours swapped, or the separators/case changed."""
    kind = draw(st.sampled_from(["drop", "add", "change", "swap", "case"]))
    i = draw(st.integers(0, len(key) - 1))
    letter = draw(st.sampled_from("abcdefghijklmnopqrstuvwxyz_"))
    if kind == "drop":
        return key[:i] + key[i + 1:]
    if kind == "add":
        return key[:i] + letter + key[i:]
    if kind == "change":
        return key[:i] + letter + key[i + 1:]
    if kind == "swap" and i + 1 < len(key):
        return key[:i] + key[i + 1] + key[i] + key[i + 2:]
    return key.replace("_", draw(st.sampled_from(["-", "", "_"]))).upper() if "_" in key else key.upper()


@given(data=st.data())
def test_a_misspelt_key_of_an_unprefixed_deploy_is_refused_with_the_key_it_misspells(data) -> None:
    """base, stack and cluster rejoin read unprefixed keys (``timezone``, ``venv``, ``lead``): an unknown key cannot
    be refused there (the host's other data looks the same), but one that misspells a key of the deploy is (sweep at
    2b91fd1: ``admin_usr=ops`` was ignored and the admin made ``labadmin``)."""
    deploy = data.draw(st.sampled_from(sorted(DEPLOYS)))
    keys, read = DEPLOYS[deploy]
    key = data.draw(st.sampled_from([k for k in keys if len(k) >= 5]))
    typo = _edits(data.draw, key)
    assume(typo not in keys and not (typo == f"{key}s" and "_" not in key))
    assume(len(key) >= 5 or typo.lower().replace("-", "_").replace("_", "") == key.replace("_", ""))
    with pytest.raises(DeployError) as caught:
        read({typo: "x"})
    line = str(caught.value)
    assert line.startswith(f"{typo}: unknown data key for this deploy (did you mean ") and "\n" not in line


@given(other=st.sampled_from(sorted({
    "ssh_user", "ssh_port", "ssh_hostname", "ssh_key", "_sudo", "lxd_remote", "proxmox_api_url", "snapshot_keep",
    "gpu", "guest", "services", "locales", "nodes", "stacks", "llamacpp_port", "tabbyapi_ref", "model_repo",
    "cluster_rejoin", "admin_email", "timezones", "venvs"})))
def test_the_hosts_other_data_passes_every_unprefixed_deploy(other) -> None:
    """pyinfra's connector keys, the other deploys' keys and a user's own names are never taken for typos."""
    from labwright.deploy_data import misspelt_key

    for keys, _read in DEPLOYS.values():
        assert misspelt_key(other, keys) is None, other


def test_no_key_of_one_labwright_deploy_reads_as_a_typo_of_another():
    """One host runs several deploys: each deploy's own keys pass the others' check."""
    from labwright.deploy_data import misspelt_key

    for name, (keys, _read) in DEPLOYS.items():
        for other, (other_keys, _) in DEPLOYS.items():
            if other != name:
                assert not [k for k in other_keys if misspelt_key(k, keys)], (name, other)
