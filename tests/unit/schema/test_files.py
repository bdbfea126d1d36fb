"""Every file labwright reads back (labwright.schema.files), generated wrong: each reader, and what its caller then
does with what it read, either works or refuses in one line naming the file, never a traceback.

Each case starts from a file of the right shape and changes one thing at one key path: a value of another JSON type
(a string, a huge or fractional number, a list, a mapping, null, a boolean), the key removed, an unknown key added;
or the bytes spoiled (not UTF-8, cut short). The file is written as its owner writes it (JSON, or YAML for the
``lxc`` client's config.yml) and read back through the real reader.
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labwright.errors import BadInput, LabwrightError
from labwright.stacks.layout import STATE_SCHEMA, state_slug
from support.host_tree import TreeHost
from support.hypothesis_budget import examples

PLAN = {"node": "pve1", "from": "570.133.07", "to": "580.82.07", "boot_kernel": "6.8.12-9-pve",
        "steps": [{"action": "snapshot", "target": "201", "detail": "before the upgrade"}], "notes": ["a note"]}
DONE = {"action": "snapshot", "target": "201", "ok": True, "detail": "taken", "seconds": 1.5}
HOST_UPGRADE = {
    "node": "pve1", "kind": "pve", "plan": PLAN, "next_step": 1, "repository": "/var/cache/labwright/nvidia",
    "phase": "done", "done": [DONE], "snapshots": {"201": "lw-upgrade"}, "services": {"201": ["tabbyapi"]},
    "previous_driver": "570.133.07", "lock_wait": 300.0, "inventory": "/etc/lab.py",
    "guests": [{"node": "pve1", "vmid": 201, "hostname": "llm1", "running": True, "dev_paths": ["/dev/nvidia0"],
                "raw_majors": [195], "raw_mounts": [], "snapshots": True, "storage": "local-lvm",
                "no_snapshot_reason": ""}],
    "extra": {"majors_before": {"nvidia-uvm": 509}}, "started": "2026-01-02T03:04:05Z",
    "outcome": {**PLAN, "ok": True, "done": [DONE], "snapshots": {"201": "lw-upgrade"}, "restored": [], "left": [],
                "message": "upgraded", "seconds": 12.5, "rebooting": False},
    "api": "pvesh", "resume_failed": "",
}
REGISTRY_STATE = {
    "sources": {
        "https://pypi.org/pypi/torch/json": {
            "etag": '"abc"', "last_modified": "", "sha256": "0" * 64, "pre": False, "checked": "2026-01-02T03:04:05Z",
            "ok": "2026-01-02T03:04:05Z", "changed": "2026-01-01T03:04:05Z", "error": "HTTP 503",
            "error_at": "2026-01-02T03:04:05Z", "newest": "2.9.0", "wheels": 12, "sdists": 0, "incomplete": ""},
        "https://download.pytorch.org/whl/cu128/torch/": {
            "name": "pytorch-cu128", "etag": "", "sha256": "", "missing": True, "wheels": 0, "pre": False,
            "changed": "2026-01-01T03:04:05Z", "checked": "2026-01-02T03:04:05Z"},
    },
    "built_against": {"torch==2.9.0": {"version": "2.9.0", "cuda": "12.8", "from": "https://x/METADATA"},
                      "fla-core==0.4.0": {"unreadable": "2026-01-02", "why": "HTTP 404"}},
}
LXC_CONFIG = {
    "default-remote": "homelab",
    "remotes": {"local": {"addr": "unix://", "public": False},
                "homelab": {"addr": "https://127.0.0.1:8443", "auth_type": "tls", "project": "gpu",
                            "protocol": "lxd", "public": False}},
    "aliases": {},
}

SUMMARY = {"trials": 2, "ttft_s": 0.25, "total_s": 2.5, "prompt_tokens": 1024, "decode_tokens": 128.5,
           "prefill_tps": 4096.0, "decode_tps": 56.9, "server_prefill_tps": None, "server_decode_tps": 57.1}
BENCH_RESULT = {
    "schema": "labwright.bench.llm/1", "label": "tabbyapi", "url": "http://127.0.0.1:5000", "model": "M",
    "endpoint": "chat", "decode": 128, "trials": 3, "started": "2026-01-02T03:04:05Z", "tokenizer": "server",
    "template_tokens": 9, "server_pid": 1234,
    "results": [{"context": 1024, "cold": {**SUMMARY}, "warm": {**SUMMARY}, "error": None,
                 "spread": {"ttft_s": 0.1, "prefill_tps": 0.05, "decode_tps": None}, "peak_rss_bytes": 2**30,
                 "peak_gpu_bytes": None, "trials": [{**SUMMARY}, {**SUMMARY}, {**SUMMARY}]},
                {"context": 4096, "error": "HTTP 500", "cold": None, "warm": None, "spread": {}, "trials": [],
                 "peak_rss_bytes": None, "peak_gpu_bytes": None}],
}

VENV = "/opt/tabbyapi/.venv"
ENTRY = {"id": "tabbyapi-cu12-0123", "path": "/var/lib/labwright/stacks/tabbyapi-cu12-0123/venv",
         "stack": "tabbyapi-cu12", "at": "2026-01-02T03:04:05Z", "managed": True, "pending": False}
STACK_STATE = {"schema": STATE_SCHEMA, "venv": VENV, "current": ENTRY, "previous": None, "history": [ENTRY]}
STACK_MANIFEST = {"id": "tabbyapi-cu12-0123", "stack": "tabbyapi-cu12", "venv": VENV, "python": "3.12",
                  "installer": "uv", "built_at": "2026-01-02T03:04:05Z",
                  "wheels": [{"package": "torch", "version": "2.9.0", "filename": "torch-2.9.0.whl", "source": "x",
                              "sha256": "0" * 64, "checked": True}],
                  "absent": [["flash-attn", "no wheel for this GPU"]], "dependencies": {}}


def _stack_state(root: Path) -> None:
    from labwright.stacks.layout import Layout

    state = Layout(root, VENV).read_state()
    [entry.id for entry in state.history]


def _stack_manifest(root: Path) -> None:
    from labwright.stacks.layout import Layout

    manifest = Layout(root, VENV).manifest(root / "env" / "venv") or {}
    [str(w["package"]) for w in manifest.get("wheels", [])]  # what `stack show` reads of it
    for _name, _why in manifest.get("absent", []):
        pass

MATRIX = {
    "components.toml": {
        "components": {"torch": {"display": "PyTorch", "packages": ["torch"], "pure_python": False},
                       "fla": {"packages": ["flash-linear-attention", "fla-core"], "pure_python": True,
                               "requires_torch": ">=2.5", "fallback": "", "cxx11_abi_since": "",
                               "pins_build_torch_since": ""}},
        "engines": {"tabbyapi": {"components": ["torch", "fla"], "required": ["torch"], "requires_python": ">=3.10",
                                 "engine_component": "", "note": "",
                                 "needs": [{"component": "fla", "when": ">=0.3", "reason": "its kernels"}]}}},
    "stacks.toml": {"stacks": {"A": {
        "description": "d", "torch": "2.9.0", "cuda": "12.8", "python": "3.12", "engine": "tabbyapi",
        "pins": ["fla-core==0.4.0"], "only": [], "source": "", "seed": {"torch": "2.9.0"},
        "disputed": [{"component": "fla", "seed": "0.4.0", "reason": "r"}], "upstream_urls": ["https://x"]}}},
    "cuda.toml": {"majors": {"12": {"compat_driver": "525.60.13", "releases": {"12.8": "570.26"}}}},
    "torch_pypi.toml": {
        "kind": "pypi-json", "source": "https://pypi.org/pypi/torch/json", "refreshed": "2026-01-02", "count": 1,
        "wheels": [{"package": "torch", "version": "2.9.0", "python": "cp312", "abi": "cp312",
                    "platform": "manylinux_2_28_x86_64", "torch": "2.9.0", "cuda": "12.8", "cxx11_abi": "TRUE",
                    "url": "https://files.pythonhosted.org/packages/torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl",
                    "sha256": "0" * 64, "source": "pypi", "seen": "2026-01-02"}]},
}


def _matrix(root: Path) -> None:
    from labwright.matrix.load import _load, load_matrix, read_components

    for name, doc in MATRIX.items():  # the files beside the one under test, as they should be
        if not (root / name).exists():
            _write(root / name, doc, "toml")
    _load.cache_clear()
    matrix = load_matrix(root)
    read_components(root / "components.toml")
    [(stack.name, stack.pins) for stack in matrix.stacks.values()]

BIOS_MANIFEST = {
    "schema": "labwright.bios-backup/1", "host": "node1", "programmer": "internal",
    "chip": {"vendor": "Winbond", "name": "W25Q128.V", "size": 16777216, "bus": "SPI"}, "size": 16777216,
    "sha256": "0" * 64, "reads": 2, "image": "node1-W25Q128.V-000000000000.bin", "flashrom_version": "1.3.0",
    "platform": None, "date": "2026-01-02T03:04:05+00:00", "descriptor": None, "regions": [], "gbe_mac": None,
    "flashrom_region_access": {}, "warnings": ["a warning"],
}


def _bios(root: Path) -> None:
    from labwright.bios import manifest

    m = manifest.load(root / "backup.json")
    chip = m["chip"]  # what `bios backup` shows of a backup it finds already taken (labwright.cli.bios)
    f"chip {chip['vendor']} {chip['name']} ({chip['size']} bytes, {chip['bus']}), flashrom {m['flashrom_version']}"
    f"sha256 {m['sha256']}"
    for warning in m.get("warnings", []):
        warning.strip()

IMAGE_RECIPE = {"image": {"name": "bookworm", "suite": "bookworm", "variant": "minbase", "architecture": "x86_64",
                          "include": ["systemd-sysv", "python3"], "files": {"/etc/hostname": "lab\n"}}}


def _image_recipe(root: Path) -> None:
    from labwright.lab.image import load_recipe

    recipe = load_recipe(root / "recipe.toml")
    recipe.digest  # noqa: B018 - what `lab up` does with it first


def _host_upgrade(root: Path) -> None:
    from labwright.hostupgrade import state
    from labwright.hostupgrade.pve import guests_from_saved

    saved = state.load(TreeHost(root))
    assert saved is not None
    saved.summary()
    saved.plan_object()
    if saved.kind == "pve":
        guests_from_saved(saved)


def _registry(root: Path) -> None:
    from labwright.matrix.registry import data_ages, read_state, stale_lines

    read_state(root)
    data_ages(root)
    stale_lines(root)


def _bench(root: Path) -> None:
    from labwright.bench import report

    doc = report.load(root / "result.json")
    docs = [doc, doc]
    report.flat_rows(docs)
    report.compare_table(docs)
    report.csv_text(docs)


def _lxc(root: Path) -> None:
    from labwright.lxd.remotes import load_client_config, resolve_endpoint

    load_client_config(root)
    for name in ("homelab", "local", None):
        try:  # the file read well: what is refused now is the remote asked for (not configured, no certificate)
            resolve_endpoint(name, root, socket_path="/run/test/unix.socket")
        except BadInput as refused:
            assert "\n" not in str(refused)


#: name -> (the file under the test's root, its right shape, the format, the reader and its caller's uses,
#: whether labwright owns the file: an unknown key refused)
FILES: dict[str, tuple[str, dict[str, Any], str, Callable[[Path], None], bool]] = {
    "host-upgrade": ("var/lib/labwright/host-upgrade.json", HOST_UPGRADE, "json", _host_upgrade, True),
    "registry-state": ("registry-state.json", REGISTRY_STATE, "json", _registry, True),
    "lxc-config": ("config.yml", LXC_CONFIG, "yaml", _lxc, False),
    # written by `bench llm --json`, whose readers show its other keys as given: those are not refused
    "bench-result": ("result.json", BENCH_RESULT, "json", _bench, False),
    # on the target (stdlib only there: labwright.stacks.layout checks them by hand); an entry's unknown key is
    # another labwright version's and left out, as before
    "stack-state": (f"state/{state_slug(VENV)}.json", STACK_STATE, "json", _stack_state, False),
    "stack-manifest": ("env/stack.json", STACK_MANIFEST, "json", _stack_manifest, False),
    # written by `bios backup`; its other keys (descriptor, regions) are a record for people
    "bios-manifest": ("backup.json", BIOS_MANIFEST, "json", _bios, False),
    "image-recipe": ("recipe.toml", IMAGE_RECIPE, "toml", _image_recipe, True),
    # the wheels matrix: what labwright ships, or a copy LABWRIGHT_MATRIX_DIR points at
    **{f"matrix-{name}": (name, doc, "toml", _matrix, name != "torch_pypi.toml") for name, doc in MATRIX.items()},
}

WRONG = st.one_of(st.text(max_size=8), st.integers(min_value=-(10**30), max_value=10**30),
                  st.floats(allow_nan=False), st.just(1e308), st.just(10**400), st.lists(st.integers(), max_size=2),
                  st.dictionaries(st.text(max_size=4), st.integers(), max_size=2), st.none(), st.booleans())


def _paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*at, index))


def _container(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


def _toml(value: Any) -> str:
    """``value`` as a TOML value (inline tables and arrays); None has no TOML form: KeyError, the key is left out."""
    if value is None:
        raise KeyError("None")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, int) or value == value else "nan"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value if item is not None) + "]"
    return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items() if v is not None) + "}"


def _write(path: Path, doc: Any, form: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if form == "toml":
        path.write_text("".join(f"{json.dumps(str(k))} = {_toml(v)}\n" for k, v in doc.items() if v is not None))
    elif form == "json":
        path.write_text(json.dumps(doc))
    else:
        import yaml

        path.write_text(yaml.safe_dump(doc))


def _read(name: str, root: Path) -> str | None:
    """The reader and its caller's uses on what is at ``root``: None when it worked, else the one-line refusal."""
    relative, _, _, reader, _ = FILES[name]
    try:
        reader(root)
    except LabwrightError as refused:  # BadInput (exit 2); OperationFailed for a file on the target
        message = str(refused)
        assert "\n" not in message, message
        assert str(root / relative) in message, message
        return message
    return None


@st.composite
def mutation(draw: st.DrawFn, name: str) -> tuple[str, Any]:
    doc = copy.deepcopy(FILES[name][1])
    path = draw(st.sampled_from([p for p in _paths(doc) if p]))
    how = draw(st.sampled_from(["replace", "remove", "add"]))
    holder = _container(doc, path)
    if how == "replace":
        holder[path[-1]] = draw(WRONG)
    elif how == "remove" and isinstance(holder, dict):
        del holder[path[-1]]
    elif how == "remove":
        holder.pop(path[-1])
    elif isinstance(holder, dict):
        holder[draw(st.text(min_size=1, max_size=6).filter(lambda k: k not in holder))] = draw(WRONG)
    else:
        holder.append(draw(WRONG))
    return how, doc


@pytest.mark.parametrize("name", sorted(FILES))
def test_the_right_shape_reads_back(name: str, tmp_path: Path) -> None:
    relative, doc, form, _, _ = FILES[name]
    _write(tmp_path / relative, doc, form)
    assert _read(name, tmp_path) is None


@pytest.mark.parametrize("name", sorted(FILES))
@settings(max_examples=examples(75), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_one_thing_wrong_anywhere_is_one_line_naming_the_file(name: str, data: st.DataObject) -> None:
    relative, _, form, _, _ = FILES[name]
    _, doc = data.draw(mutation(name))
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        _write(root / relative, doc, form)
        _read(name, root)


@pytest.mark.parametrize("name", sorted(FILES))
@settings(max_examples=examples(30), deadline=None)
@given(spoil=st.one_of(st.binary(min_size=1, max_size=4).map(lambda b: b"\xff" + b), st.integers(0, 40)))
def test_bytes_that_are_not_the_file_are_one_line(name: str, spoil: bytes | int) -> None:
    relative, doc, form, _, _ = FILES[name]
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        _write(root / relative, doc, form)
        good = (root / relative).read_bytes()
        spoiled = good[: len(good) // 2] + spoil + good[len(good) // 2:] if isinstance(spoil, bytes) else \
            good[:spoil]
        (root / relative).write_bytes(spoiled)
        _read(name, root)


@pytest.mark.parametrize("name", [name for name, (*_, owned) in FILES.items() if owned])
def test_an_unknown_key_in_a_file_labwright_writes_is_refused_naming_the_closest(name: str, tmp_path: Path) -> None:
    relative, doc, form, _, _ = FILES[name]
    doc = {**copy.deepcopy(doc), "sorces": {}}
    _write(tmp_path / relative, doc, form)
    message = _read(name, tmp_path)
    assert message is not None and "sorces: an unknown key" in message


def test_the_refusal_names_the_key_path_and_the_fix(tmp_path: Path) -> None:
    doc = copy.deepcopy(HOST_UPGRADE)
    doc["outcome"] = "upgraded"  # was AttributeError: 'str' object has no attribute 'get'
    path = tmp_path / FILES["host-upgrade"][0]
    _write(path, doc, "json")
    assert _read("host-upgrade", tmp_path) == (
        f"{path}: not a host upgrade state labwright can read (outcome: 'upgraded': input should be a valid "
        "dictionary); look at it, restore guests by hand if needed, then remove it")
    state = copy.deepcopy(REGISTRY_STATE)
    state["sources"]["https://pypi.org/pypi/torch/json"]["wheels"] = "12"
    _write(tmp_path / "registry-state.json", state, "json")
    assert _read("registry-state", tmp_path) == (
        f"{tmp_path / 'registry-state.json'}: not the registry state of `matrix refresh` labwright can read "
        "(sources.https://pypi.org/pypi/torch/json.wheels: '12': input should be a valid integer); remove it (the "
        "next refresh fetches everything again) or restore it from registry-state.json.prev")
    config = copy.deepcopy(LXC_CONFIG)
    config["remotes"]["homelab"] = "https://127.0.0.1:8443"
    _write(tmp_path / "config.yml", config, "yaml")
    assert _read("lxc-config", tmp_path) == (
        f"{tmp_path / 'config.yml'}: not an lxd client configuration labwright can read (remotes.homelab: "
        "'https://127.0.0.1:8443': input should be a valid dictionary); fix it with `lxc remote` or by hand")


def _one_error_line(proc: Any, path: Path) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"labwright: error: {path}: not "), proc.stderr
    return str(proc.stderr)


def test_the_commands_that_read_these_files_exit_2_with_one_line(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """Through the CLI: a command reading a file of the wrong shape exits 2 before it does anything else."""
    from support.cli_child import run_cli

    result = copy.deepcopy(BENCH_RESULT)
    result["results"][0]["warm"]["decode_tps"] = "fast"
    _write(tmp_path / "a.json", result, "json")
    proc = run_cli(["bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "a.json")], env=cli_env)
    assert "results[0].warm.decode_tps: 'fast'" in _one_error_line(proc, tmp_path / "a.json")

    out = tmp_path / "matrix"
    state = copy.deepcopy(REGISTRY_STATE)
    state["built_against"]["torch==2.9.0"] = "12.8"
    _write(out / "registry-state.json", state, "json")
    before = (out / "registry-state.json").read_bytes()
    # a port nothing answers on: the state is read (and refused) before any request
    proc = run_cli(["matrix", "refresh", "--out", str(out), "--index", "http://127.0.0.1:9/pypi", "--pytorch-index",
                    "http://127.0.0.1:9", "--github-api", "http://127.0.0.1:9"], env=cli_env)
    assert "built_against.torch==2.9.0: '12.8'" in _one_error_line(proc, out / "registry-state.json")
    assert sorted(p.name for p in out.iterdir()) == ["registry-state.json"]
    assert (out / "registry-state.json").read_bytes() == before

    matrix = tmp_path / "shipped"
    for name, doc in MATRIX.items():
        _write(matrix / name, doc, "toml")
    stacks = copy.deepcopy(MATRIX["stacks.toml"])
    stacks["stacks"]["A"]["pins"] = "fla-core==0.4.0"
    _write(matrix / "stacks.toml", stacks, "toml")
    proc = run_cli(["matrix", "show"], env={**cli_env, "LABWRIGHT_MATRIX_DIR": str(matrix)})
    assert "stacks.A.pins: 'fla-core==0.4.0'" in _one_error_line(proc, matrix / "stacks.toml")
