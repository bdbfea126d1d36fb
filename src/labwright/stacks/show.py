"""`stack show`: the current and previous environments of a managed path, as field note 001's "check package stack"
snippet printed them, but from the ABI verifier's truth (symbols + a real import) instead of find_spec.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labwright.errors import LabwrightError
from labwright.stacks.layout import Entry, Layout

SCHEMA = "labwright.stack-show/1"


@dataclass
class Row:
    package: str
    version: str  # "" when not installed
    verdict: str  # ok | broken | not-installed | absent | no-extension
    detail: str = ""


@dataclass
class EnvView:
    role: str  # current | previous
    entry: Entry
    exists: bool
    torch: str | None = None
    ok: bool = False
    rows: list[Row] = field(default_factory=list)
    error: str = ""  # the verifier could not run (no torch, broken interpreter)


def show(root: str, venv: str, do_import: bool = True) -> dict[str, Any]:
    layout = Layout(root, venv)
    found = layout.inspect()
    state = layout.read_state()
    current = state.current
    if found.target and (current is None or os.path.realpath(current.path) != os.path.realpath(found.target)):
        # The path points somewhere the state does not record (a venv not yet switched, or edited by hand):
        # show what is really there.
        manifest = layout.manifest(found.target) or {}
        current = Entry(id=str(manifest.get("id", "-")), path=found.target, stack=str(manifest.get("stack", "-")),
                        managed=found.kind == "managed")
    views = [view_of(layout, role, entry, do_import) for role, entry in (("current", current),
                                                                       ("previous", state.previous)) if entry]
    return {"schema": SCHEMA, "venv": venv, "kind": found.kind, "target": found.target,
            "environments": [_json(v) for v in views]}


def view_of(layout: Layout, role: str, entry: Entry, do_import: bool) -> EnvView:
    from labwright.matrix.abi import verify_python
    from labwright.matrix.abi_cache import AbiCache

    view = EnvView(role=role, entry=entry, exists=Path(entry.path, "bin").is_dir())
    if not view.exists:
        view.error = f"{entry.path} is gone (garbage-collected or removed by hand)"
        return view
    manifest = layout.manifest(entry.path) or {}
    installed = installed_versions(Path(entry.path))
    try:
        report = verify_python(str(Path(entry.path) / "bin" / "python"), None, do_import=do_import, cache=AbiCache())
    except LabwrightError as exc:
        view.error = str(exc)
        report = None
    by_dist: dict[str, list[Any]] = {}
    if report is not None:
        view.torch, view.ok = report.torch_version, report.ok
        for module in report.modules:
            by_dist.setdefault(normalize(module.distribution or module.module), []).append(module)
    wanted = [str(w["package"]) for w in manifest.get("wheels", [])] or ["torch", *sorted(by_dist)]
    for package in wanted:
        version = installed.get(normalize(package), "")
        modules = by_dist.pop(normalize(package), [])
        view.rows.append(_row(package, version, modules, report))
    for name, modules in sorted(by_dist.items()):  # extensions outside the stack's list (installed by hand)
        view.rows.append(_row(name, installed.get(name, ""), modules, report))
    for name, why in manifest.get("absent", []):
        view.rows.append(Row(str(name), "", "absent", str(why)))
    return view


def _row(package: str, version: str, modules: list[Any], report: Any) -> Row:
    if not version and not modules:
        return Row(package, "", "not-installed", "no such distribution in this environment")
    if normalize(package) == "torch" and report is not None:
        torch_import = report.torch_import
        if torch_import is not None and not torch_import.ok:
            return Row(package, version, "broken", f"import torch fails: {(torch_import.error or '').strip()}")
        checked = len(report.modules)
        return Row(package, version, "ok", f"{len(report.torch_libs)} lib(s) in torch/lib; {checked} extension(s) "
                                           "checked against them")
    if not modules:
        return Row(package, version, "no-extension", "no compiled module linking torch (nothing for the ABI "
                                                     "verifier to check)")
    broken = [m for m in modules if m.verdict != "ok"]
    if not broken:
        return Row(package, version, "ok", ", ".join(f"{m.module}: ok" for m in modules))
    first = broken[0]
    if first.missing:
        detail = f"{first.module}: {len(first.missing)} torch symbol(s) missing, e.g. {first.missing[0].demangled}"
    else:
        detail = f"{first.module}: {(first.import_error or first.verdict).strip().splitlines()[0]}"
    return Row(package, version, "broken", detail)


def installed_versions(venv: Path) -> dict[str, str]:
    versions: dict[str, str] = {}
    for dist_info in venv.glob("lib/python*/site-packages/*.dist-info"):
        name, _, version = dist_info.name[: -len(".dist-info")].partition("-")
        versions[normalize(name)] = version
    return versions


def normalize(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def _json(view: EnvView) -> dict[str, Any]:
    return {"role": view.role, **asdict(view.entry), "exists": view.exists, "torch": view.torch, "ok": view.ok,
            "error": view.error, "packages": [asdict(r) for r in view.rows]}


def render(data: dict[str, Any]) -> list[str]:
    """Plain text (the target side has no rich): one block per environment, one line per package."""
    lines = [f"{data['venv']} -> {data['target'] or '(nothing)'} ({data['kind']})"]
    if not data["environments"]:
        lines.append("  no environment recorded: `stack switch` has not run for this path")
    for env in data["environments"]:
        status = "ok" if env["ok"] else ("GONE" if not env["exists"] else "BROKEN")
        lines.append(f"{env['role']}: stack {env['stack']} ({env['id']}) [{status}]" +
                     (f" since {env['at']}" if env.get("at") else ""))
        lines.append(f"  {env['path']}")
        if env["error"]:
            lines.append(f"  error: {env['error']}")
        width = max([len(p["package"]) for p in env["packages"]] + [7])
        for package in env["packages"]:
            version = package["version"] or "-"
            verdict = {"not-installed": "NOT INSTALLED", "broken": "BROKEN"}.get(package["verdict"],
                                                                                package["verdict"])
            lines.append(f"  {package['package']:<{width}}  {version:<24} {verdict:<13} {package['detail']}")
    return lines
