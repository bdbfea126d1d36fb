"""Inventories, loaded the way ``pyinfra INVENTORY deploy.py`` loads them: one loader for every labwright command.

``labwright lab``, ``labwright guest``, ``labwright cluster`` and ``deploys/guest.py`` read an inventory here, so they
see exactly the hosts, groups and data a pyinfra run of the same file sees:

- the inventory file is executed as pyinfra's CLI executes it; its module-level lists and ``(hosts, data)`` tuples are
  the groups (names starting with ``_`` are not), every host is also in the group named after the file (``lab.py``:
  ``lab``) unless the file defines that name, and an ``all`` group's data is the data of every host;
- ``group_data/*.py`` beside the inventory and in the working directory (plus ``group_data_directories``, pyinfra's
  ``--group-data``) give more data to the group named like the file (``all.py``: every host); a group_data file's
  values replace the inventory file's data for the same group (the working directory's folder first, then the
  inventory's, then the extra ones; later folders win);
- hosts, groups and the merged data are pyinfra's own ``pyinfra.api.Inventory``: connector names go through the
  connectors' ``make_names_data`` (``@lxd/NAME``, ``@pct/NODE/VMID``: ``labwright.hostnames``), and a host's data is
  ``host.data``: host data over group data (a later group over an earlier one) over ``all`` data over the
  connector's data.

The file-to-groups step follows ``pyinfra_cli/inventory.py`` (``make_inventory_from_files``, ``_get_group_data``,
``_is_inventory_group``; pyinfra 3.10) rather than calling it, because importing ``pyinfra_cli`` monkey-patches the
whole process with gevent (``pyinfra_cli/__init__.py``: ``monkey.patch_all()``), which labwright's own threads and
sockets must not get. ``tests/unit/inventory`` holds the result equal to ``pyinfra INVENTORY debug-inventory``'s.

Anything wrong with the inventory is one ``BadInput`` line (exit 2) naming the file and, for an error in the user's
code, the user's own line: a raise, ``sys.exit()``, a syntax error, bytes that are not UTF-8, a missing file, a bad
``@pct``/``@lxd`` name.
"""

from __future__ import annotations

import ast
import os
import sys
import sysconfig
import traceback
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from pyinfra import logger
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.inventory import Inventory
from pyinfra.context import ctx_inventory

import labwright
from labwright.errors import BadInput, LabwrightError

__all__ = ["InventoryHost", "LoadedInventory", "load_inventory"]


@dataclass(frozen=True)
class InventoryHost:
    """One host as a pyinfra run sees it: ``data`` is ``host.data`` (everything merged), ``groups`` its groups
    (the inventory's, the file's, the connector's such as ``@lxd``), in pyinfra's order without repeats."""

    name: str
    data: Mapping[str, Any]
    groups: tuple[str, ...]


@dataclass(frozen=True)
class LoadedInventory:
    path: Path
    hosts: tuple[InventoryHost, ...]  # in inventory order
    all_data: Mapping[str, Any]  # the `all` group's data with group_data/all.py
    group_data: Mapping[str, Mapping[str, Any]]  # every group's own data (inventory file, then group_data/)
    declared_groups: frozenset[str]  # groups the inventory or a group_data file names (not the implicit file group)
    pyinfra: Inventory = field(compare=False, repr=False)  # the same hosts as pyinfra.api objects

    def __iter__(self) -> Iterator[InventoryHost]:
        return iter(self.hosts)

    def host(self, name: str) -> InventoryHost | None:
        return next((h for h in self.hosts if h.name == name), None)

    def group(self, name: str) -> list[InventoryHost]:
        """The hosts of group ``name`` in inventory order (empty for an unknown group)."""
        return [h for h in self.hosts if name in h.groups]

    def declares(self, name: str) -> bool:
        """Whether the inventory defines group ``name`` itself (an empty group counts; the group pyinfra makes
        from the file name, ``inventories/lab.py`` -> ``lab``, does not)."""
        return name in self.declared_groups


def load_inventory(
    path: str | Path,
    *,
    cwd: str | Path | None = None,
    group_data_directories: Iterable[str | Path] = (),
    override_data: Mapping[str, Any] | None = None,
) -> LoadedInventory:
    """Load ``path`` as ``pyinfra PATH ...`` run from ``cwd`` (default: the working directory) would.

    ``group_data_directories`` are pyinfra's ``--group-data`` folders, ``override_data`` its ``--data``."""
    path = Path(path)
    if not path.exists():
        raise BadInput(f"inventory {path}: no such file; pass an existing file (a pyinfra inventory)")
    if not path.is_file():
        raise BadInput(f"inventory {path}: not a file; pass a pyinfra inventory file (a .py file of host groups)")
    cwd_text = str(cwd) if cwd is not None else os.getcwd()
    # pyinfra's CLI puts its working directory on sys.path (pyinfra_cli/cli.py), so an inventory may import a
    # helper module that lives there.
    added_path = cwd_text not in sys.path
    if added_path:
        sys.path.append(cwd_text)
    try:
        inventory, declared = _make_inventory(str(path), cwd_text, [str(d) for d in group_data_directories],
                                              dict(override_data or {}))
        hosts = tuple(
            InventoryHost(host.name, host.data.dict(), tuple(dict.fromkeys(host.groups)))
            for host in inventory
        )
    except _UserCodeFailed as exc:
        raise BadInput(exc.message(path)) from None
    except LabwrightError as exc:  # labwright.hostnames.BadHostName from a connector's make_names_data
        raise BadInput(f"inventory {path}: {exc}") from None
    except PyinfraError as exc:  # NoConnectorError (`@nosuch/x`), a connector's InventoryError
        raise BadInput(f"inventory {path}: {_one_line(str(exc))}; fix the host name") from None
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
        # Groups pyinfra cannot use, such as (hosts, "not a dict"): pyinfra itself fails on these too.
        raise BadInput(f"inventory {path}: pyinfra cannot read its groups ({type(exc).__name__}: "
                       f"{_one_line(str(exc))}); write each group as [hosts] or ([hosts], {{data}})") from None
    finally:
        if added_path and cwd_text in sys.path:
            sys.path.remove(cwd_text)
    return LoadedInventory(
        path=path, hosts=hosts, all_data=dict(inventory.get_data()),
        group_data={name: dict(data) for name, data in inventory.group_data.items()},
        declared_groups=frozenset(declared), pyinfra=inventory,
    )


# --- pyinfra_cli/inventory.py, make_inventory_from_files (pyinfra 3.10), without importing pyinfra_cli ----------
def _make_inventory(filename: str, cwd: str, extra_group_data: list[str],
                    override_data: dict[str, Any]) -> tuple[Inventory, set[str]]:
    attrs, code_names, _ = _exec_file(filename)
    groups: dict[str, Any] = {key: value for key, value in attrs.items() if _is_inventory_group(key, value)}
    declared = set(groups)
    _refuse_host_data_twice(groups)
    file_groupname = Path(filename).name.rsplit(".", 1)[0]

    all_data: dict[str, Any] = {}
    if "all" in groups:
        all_hosts = groups.pop("all")
        if isinstance(all_hosts, tuple):
            all_hosts, all_data = all_hosts
    else:
        all_hosts = []
        for hosts in groups.values():
            for host in _first(hosts):
                hostname = _first(host)
                if hostname not in all_hosts:
                    all_hosts.append(hostname)
    groups["all"] = (all_hosts, all_data)
    if file_groupname not in groups:
        groups[file_groupname] = all_hosts
    if file_groupname in code_names:  # `from x import lab` defines it too, even when pyinfra ignores the value
        declared.add(file_groupname)

    fake_groups = {name: group if isinstance(group, tuple) else (group, {}) for name, group in groups.items()}
    fake_inventory = Inventory((all_hosts, all_data), **fake_groups)

    folders = [str(Path(cwd) / "group_data")] if cwd else []
    inventory_dirname = str(Path(filename).parent.resolve())
    if inventory_dirname != cwd:
        folders.append(str(Path(inventory_dirname) / "group_data"))
    folders.extend(extra_group_data)

    group_data: dict[str, dict[str, Any]] = defaultdict(dict)
    with ctx_inventory.use(fake_inventory):  # group_data files may read the inventory (pyinfra does the same)
        for folder in folders:
            for group_name, file_data in _get_group_data(folder).items():
                group_data[group_name].update(file_data)
    declared.update(group_data)

    for name, hosts in groups.items():
        data: dict[str, Any] = {}
        if isinstance(hosts, tuple):
            hosts, data = hosts
        if name in group_data:
            data.update(group_data.pop(name))
        groups[name] = (hosts, data)
    for name, leftover in group_data.items():  # groups only a connector adds (`@lxd`) may have group_data too
        groups[name] = ([], leftover)
    return Inventory(groups.pop("all"), override_data=override_data, **groups), declared


def _refuse_host_data_twice(groups: Mapping[str, Any]) -> None:
    """A host listed with data of its own (``("@lxd/web", {...})``) more than once: pyinfra keeps the last data and
    drops the rest without a word (sweep at 2b91fd1: one guest declared with ``clone`` and again with ``image`` was
    planned as the second alone). Listing a host in several groups without data of its own stays fine."""
    seen: dict[str, str] = {}
    for group, hosts in groups.items():
        for item in _first(hosts) if isinstance(_first(hosts), list | tuple) else ():
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], Mapping) and item[1]:
                name = str(item[0])
                if name in seen:
                    where = f"group {group}" if seen[name] == group else f"groups {seen[name]} and {group}"
                    raise BadInput(f"host {name} is given data of its own twice (in {where}); pyinfra would keep "
                                   "only the last: declare it once, or move the shared part to a group's data")
                seen[name] = group


def _first(item: Any) -> Any:
    return item[0] if isinstance(item, tuple) else item


def _is_inventory_group(key: str, value: Any) -> bool:
    if key.startswith("_"):
        return False
    if isinstance(value, tuple):
        value = value[0]
    elif not isinstance(value, list):
        return False
    if not all(isinstance(item, str | tuple) for item in value):
        logger.warning(f'Ignoring host group "{key}". Host groups may only contain strings (host) or tuples '
                       "(host, data).")
        return False
    return True


def _get_group_data(folder: str) -> dict[str, dict[str, Any]]:
    group_data: dict[str, dict[str, Any]] = {}
    if not Path(folder).exists():
        return group_data
    files = [folder] if Path(folder).is_file() else [str(Path(folder) / name) for name in os.listdir(folder)]
    for file in files:
        if not file.endswith(".py"):
            continue
        attrs, _, source = _exec_file(file)
        keys = attrs["__all__"] if "__all__" in attrs else [k for k in attrs if k not in _imported_names(source, file)]
        group_data[Path(file).stem] = {k: v for k, v in attrs.items() if k in keys and not k.startswith("__")}
    return group_data


def _read_source(filename: str) -> str:
    try:
        raw = Path(filename).read_bytes()
    except OSError as exc:
        raise _UserCodeFailed(filename, f"cannot read it ({exc.strerror})", fix="check the file") from None
    try:
        text = raw.decode("utf-8")  # pyinfra opens inventories and group_data files as UTF-8
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise _UserCodeFailed(filename, f"line {line}: byte {raw[exc.start]:#04x} is not UTF-8 text",
                              fix="save the file as UTF-8") from None
    return text


def _imported_names(source: str, filename: str) -> set[str]:
    """Names bound by top-level imports, which pyinfra keeps out of group data (pyinfra issue #1297)."""
    names: set[str] = set()
    for node in ast.parse(source, filename=filename).body:
        if isinstance(node, ast.Import):
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names if alias.name != "*")
    return names


def _exec_file(filename: str) -> tuple[dict[str, Any], frozenset[str], str]:
    """Execute a file as pyinfra_cli.util.exec_file does: its module-level names, and the names its code binds or
    reads at module level (to tell a group the file defines from the one pyinfra makes from the file name)."""
    source = _read_source(filename)
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as exc:
        raise _UserCodeFailed(filename, f"line {exc.lineno}: {exc.msg}", fix="fix the Python syntax") from None
    namespace: dict[str, Any] = {"__file__": filename}
    real_exit = os._exit
    os._exit = _refuse_os_exit  # would end labwright at once, status 0, no output
    try:
        exec(code, namespace)
    except _OsExit as exc:
        raise _UserCodeFailed.from_traceback(filename, exc, f"calls os._exit({exc.status})",
                                             fix="an inventory defines groups and must not exit") from None
    except SystemExit as exc:  # `sys.exit()` in an inventory must not end labwright with its status
        raise _UserCodeFailed.from_traceback(
            filename, exc, f"calls sys.exit({'' if exc.code is None else repr(exc.code)})",
            fix="an inventory defines groups and must not exit") from None
    except Exception as exc:  # the inventory is the user's code: whatever it raises is bad input
        raise _UserCodeFailed.from_traceback(filename, exc, f"{type(exc).__name__}: {_one_line(str(exc))}",
                                             fix="fix the inventory") from None
    finally:
        os._exit = real_exit
    return namespace, frozenset(code.co_names), source


class _OsExit(BaseException):
    """``os._exit(n)`` called by an inventory while it loads (a BaseException: the inventory's own ``except
    Exception`` does not swallow it)."""

    def __init__(self, status: object):
        super().__init__(status)
        self.status = status


def _refuse_os_exit(status: object) -> NoReturn:
    raise _OsExit(status)


class _UserCodeFailed(Exception):
    """An inventory or group_data file failed to run: ``where`` is the file and line of the user's code."""

    def __init__(self, filename: str, what: str, fix: str, line: str = ""):
        super().__init__(what)
        self.filename, self.what, self.fix, self.line = filename, what, fix, line

    @classmethod
    def from_traceback(cls, filename: str, exc: BaseException, what: str, fix: str) -> _UserCodeFailed:
        frame = _user_frame(exc, filename)
        if frame is None:
            return cls(filename, what, fix)
        code = f" `{frame.line.strip()}`" if frame.line and frame.line.strip() else ""
        return cls(frame.filename, f"line {frame.lineno}{code}: {what}", fix)

    def message(self, inventory: Path) -> str:
        where = f"inventory {inventory}" if self.filename == str(inventory) else \
            f"inventory {inventory}: {self.filename}"
        return f"{where}: {self.what}; {self.fix}"


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    dirs.add(str(Path(labwright.__file__).parent))
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs)


def _user_frame(exc: BaseException, filename: str) -> traceback.FrameSummary | None:
    """The deepest frame of the user's own code: not Python's, a library's or labwright's (a helper module the
    inventory imports counts as the user's); else the deepest frame in the file that was run."""
    frames = traceback.extract_tb(exc.__traceback__)
    libraries = _library_dirs()
    own = [f for f in frames if not f.filename.startswith("<")
           and not os.path.realpath(f.filename).startswith(libraries)]
    if own:
        return own[-1]
    in_file = [f for f in frames if f.filename == filename]
    return in_file[-1] if in_file else None


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "(no message)"
