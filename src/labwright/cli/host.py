"""`labwright host`: runbooks for the GPU host itself (`upgrade`: a driver/kernel upgrade every GPU guest survives)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from labwright.cli import vocab
from labwright.errors import BadInput, LabwrightError
from labwright.gpu.nvidia.upgrade_facts import REPOSITORY, node_facts, repository_versions
from labwright.hosts.local import LocalHost
from labwright.hostupgrade import state
from labwright.hostupgrade.node import Node, this_node
from labwright.hostupgrade.plan import Plan, make_plan
from labwright.hostupgrade.run import Done, NodeHost, Outcome, Upgrade, end_resume, remove_credentials_and_unit
from labwright.hostupgrade.trust import verify_repository_installer
from labwright.inventory import load_inventory
from labwright.lxd.client import LxdClient
from labwright.lxd.remotes import resolve_endpoint
from labwright.ui import stdout, table

NAME = "host"
HELP = "GPU host runbooks: upgrade the NVIDIA driver/kernel with snapshots, exact userspace and device majors."

app = typer.Typer(no_args_is_help=True, help=HELP)


@app.command()
def upgrade(
    node: str = typer.Argument(..., metavar="NODE", callback=vocab.host_option("NODE"),
                               help="This host's name (the runbook runs on the node itself)."),
    to: str | None = typer.Option(None, "--to",
                                  callback=vocab.version_option("--to", r"[0-9]+\.[0-9]+(?:\.[0-9]+)?", "550.54.15"),
                                  help="Driver version to install (default: the newest in the "
                                  "repository)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do it (without: print the plan, change nothing)."),
    dry: bool = vocab.DryOption,
    pin_kernel: bool = typer.Option(False, "--pin-kernel", help="When the new kernel has no driver build: pin the "
                                    "running kernel instead of refusing."),
    fix_mismatched: bool = typer.Option(False, "--fix-mismatched", help="A running guest whose userspace already "
                                        "differs from the loaded module is refused; with this it gets the new "
                                        "userspace with the upgrade."),
    repository: Path | None = typer.Option(None, "--repository", help="Directory of NVIDIA-Linux-x86_64-VERSION.run "
                                           f"installers (default {REPOSITORY}).", show_default=False),
    inventory: Path | None = typer.Option(None, "--inventory", "-i", metavar="FILE", help="pyinfra inventory with "
                                          "NODE as a Proxmox VE node (proxmox_api_url in its host data): its GPU "
                                          "containers are carried through the upgrade (without: LXD's).",
                                          show_default=False),
    lock_wait: float = vocab.LockWaitOption,
    resume: bool = typer.Option(False, "--resume", help="Go on after the upgrade's reboot (what the boot unit "
                                "labwright-host-upgrade.service runs; by hand when it could not)."),
    as_json: bool = vocab.JsonOption,
) -> None:
    """Upgrade the NVIDIA driver (and boot the new kernel) with every GPU guest carried through: refuse a kernel
    without a driver build (or --pin-kernel), snapshot every GPU guest, install the driver, install a boot unit for
    the device nodes, reboot, re-read the majors into the guests, install the exactly matching userspace in each,
    restart them and their engines, run gpu check on each; on a failure restore the snapshots.
    On a real node the reboot is real: the run saves its state in /var/lib/labwright/host-upgrade.json and the boot
    unit labwright-host-upgrade.service resumes it (`journalctl -u labwright-host-upgrade`); run it again without
    --yes to see how it ended.
    Exit 0: done, rebooting to go on, or the plan printed; 1: failed (what was restored and what was left is said);
    2: bad input.

    Example: labwright host upgrade pve1 -i inventories/lab.py --to 550.54.15 --yes
    """
    if resume and (yes or dry):
        raise BadInput("--resume goes on with the upgrade the state file describes; give it without --yes/--dry")
    if not resume:
        vocab.dry_or_yes(dry, yes)
    vocab.check_lock_wait(lock_wait)
    node_data = _pve_node(node, inventory) if inventory is not None and not resume else None
    here = this_node()
    files = here.files
    names = here.names()
    if node not in names:
        raise BadInput(f"node {node!r} is not this host (it answers to {', '.join(names)}); run `labwright host "
                       "upgrade` on the node itself with its name")
    if yes or resume:
        here.require_root()
    saved = state.load(files)
    if saved is not None and saved.node != node:
        raise BadInput(f"{state.state_file(files)} is an upgrade of node {saved.node!r}, not {node!r}; give "
                       f"{saved.node} (this host's name when it started)")
    if resume:
        _finish(node, _resume(node, here, saved, as_json), as_json)
        return
    if saved is not None and saved.phase == state.REBOOTING:
        if yes:
            raise BadInput(f"node {node}: {saved.summary()}; nothing was changed")
        print(f"labwright: note: {saved.summary()}", file=sys.stderr)
    elif saved is not None:
        print(f"labwright: note: the last upgrade: {saved.summary()}", file=sys.stderr)
    repo = repository if repository is not None else files.local_path(REPOSITORY)
    label = f"--repository {repo}" if repository is not None else f"the repository {repo} (--repository DIR)"
    if not repo.is_dir():
        raise BadInput(f"{label}: not a directory; give the directory of NVIDIA-Linux-x86_64-VERSION.run installers")
    if not repository_versions(repo):
        raise BadInput(f"{label}: no NVIDIA-Linux-x86_64-VERSION.run in it; add the installer of the driver to "
                       "install")
    here.require_driver()
    host = here.host(repo.resolve())
    api_mode = here.api_mode() if node_data is not None else state.HTTPS
    if yes:
        # the boot unit runs this interpreter, labwright, the inventory (over HTTPS) and the installers as root
        here.check_root_code(inventory.resolve() if inventory is not None and api_mode == state.HTTPS else None,
                             repo.resolve())
    if node_data is not None:
        assert inventory is not None
        outcome = _pve_upgrade(node, here, repo, node_data, to, pin_kernel, fix_mismatched, yes, as_json,
                               lock_wait, host, inventory, api_mode)
    else:
        outcome = _lxd_upgrade(node, files, repo, to, pin_kernel, fix_mismatched, yes, as_json, lock_wait, host)
    if outcome is not None:
        _finish(node, outcome, as_json)


def _finish(node: str, outcome: Outcome, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(outcome.to_dict(), indent=2))
    else:
        for line in outcome.left:
            stdout.print(f"  left: {escape(line)}")
        stdout.print(escape(outcome.message) + f" ({outcome.seconds:.1f} s)")
    if not outcome.ok:
        print(f"labwright: host upgrade {node}: {outcome.message}", file=sys.stderr)
        raise typer.Exit(1)


def _resume(node: str, here: Node, saved: state.Saved | None, as_json: bool) -> Outcome:
    """The saved upgrade carried on after its reboot (the boot unit's command). However it ends (done, failed,
    refused while reading the inventory or reaching the API, stopped on anything else) the carried credentials and
    the resume unit are removed (the unit's ExecStopPost= does the same when this process is killed); a resume that
    stopped before its end is left to be resumed by hand, saying why."""
    files = here.files
    if saved is None:
        raise BadInput(f"node {node}: no upgrade to resume ({state.state_file(files)} does not exist); start one with "
                       f"`labwright host upgrade {node} --yes`")
    if saved.phase != state.REBOOTING:
        state.remove_env(files)  # nothing to resume: nothing needs the credentials either
        raise BadInput(f"node {node}: nothing to resume: {saved.summary()}")
    saved.resume_failed = ""
    host = here.resume_host(Path(saved.repository))
    try:
        return _resumed(node, here, saved, host, as_json)
    except BaseException as exc:
        if saved.phase == state.REBOOTING and not saved.resume_failed:
            why = str(exc) if isinstance(exc, LabwrightError) else f"{type(exc).__name__}: {exc}"
            end_resume(files, host, saved, (why.splitlines() or [""])[0][:300])
        raise
    finally:
        if state.leftovers(files):
            remove_credentials_and_unit(files, host)


def _resumed(node: str, here: Node, saved: state.Saved, host: NodeHost, as_json: bool) -> Outcome:
    plan = saved.plan_object()
    files = here.files
    repo = Path(saved.repository)
    over_https = saved.kind == "pve" and saved.api == state.HTTPS
    # what this root run reads and runs from here is root's alone (trust.py)
    here.check_root_code(Path(str(saved.inventory)) if over_https else None, repo)
    upgrade: Upgrade
    if saved.kind == "pve":
        from labwright.guests.proxmox_api import Credentials, connect
        from labwright.hostupgrade.pve import PveUpgrade, guests_from_saved, pvesh_api

        if over_https:
            node_data = _pve_node(node, Path(str(saved.inventory)))
            api = connect(Credentials.from_env(), node, node_data)
        else:  # the node acts as root itself: no inventory read, no secret needed (pve.pvesh_api)
            api = pvesh_api()
        pve = PveUpgrade(plan, files, repo, api, guests_from_saved(saved), _progress(as_json), host=host)
        pve.majors_before = {str(k): int(v) for k, v in saved.extra.get("majors_before", {}).items()}
        pve.lock_wait = saved.lock_wait
        return pve.resume(saved)
    endpoint, project = resolve_endpoint(None)
    client = LxdClient(endpoint, project=project)
    try:
        upgrade = Upgrade(plan, files, repo, client, _progress(as_json), host=host)
        upgrade.lock_wait = saved.lock_wait
        return upgrade.resume(saved)
    finally:
        client.close()


def _pve_node(node: str, inventory: Path) -> dict[str, Any]:
    """The inventory's host data of ``node``, a Proxmox VE node (its ``proxmox_api_url``)."""
    loaded = load_inventory(vocab.inventory(inventory, None))
    host = loaded.host(node)
    if host is None:
        known = ", ".join(h.name for h in loaded.hosts if not h.name.startswith("@")) or "none"
        raise BadInput(f"node {node!r} is not in the inventory {inventory} (its nodes: {known}); give the name of a "
                       "Proxmox VE node from it")
    if not host.data.get("proxmox_api_url"):
        raise BadInput(f"node {node!r} in {inventory} has no proxmox_api_url in its host data; set it (e.g. "
                       "https://NODE:8006) so the node's containers can be read and snapshotted through the API")
    return dict(host.data)


def _verify_installers(repo: Path, plan: Plan) -> None:
    """Before anything is done: the target's installer (and the loaded version's, which a failure puts back) match
    the sha256 recorded beside them (trust.py); each is checked again right before it runs."""
    verify_repository_installer(repo, plan.to_version)
    verify_repository_installer(repo, plan.from_version)


def _with_installer_notes(repo: Path, plan: Plan) -> Plan:
    """The dry plan notes an installer --yes would refuse (no recorded sha256, or not matching it)."""
    for version in dict.fromkeys((plan.to_version, plan.from_version)):
        try:
            verify_repository_installer(repo, version)
        except BadInput as exc:
            plan.notes.append(f"--yes will refuse: {exc}")
    return plan


def _show_plan(node: str, plan: Plan, as_json: bool) -> None:
    for note in plan.notes:
        print(f"labwright: note: {note}", file=sys.stderr)
    if as_json:
        typer.echo(json.dumps({**plan.to_dict(), "dry": True}, indent=2))
        return
    rows = [[str(i), s.action, escape(s.target), escape(s.detail)] for i, s in enumerate(plan.steps, 1)]
    stdout.print(table(f"host upgrade {node}: nvidia {plan.from_version} -> {plan.to_version}, boot "
                       f"{plan.boot_kernel} (dry run: nothing changed; --yes to do it)",
                       ["#", "step", "target", "what"], rows))


def _progress(as_json: bool) -> Callable[[Done], None]:
    def progress(done: Done) -> None:
        if not as_json:
            mark = "ok" if done.ok else "[red]FAIL[/]"
            stdout.print(f"{mark} {done.action} {escape(done.target)}: {escape(done.detail)} ({done.seconds:.1f} s)")
    return progress


def _lxd_upgrade(node: str, files: LocalHost, repo: Path, to: str | None, pin_kernel: bool, fix_mismatched: bool,
                 yes: bool, as_json: bool, lock_wait: float, host: NodeHost) -> Outcome | None:
    endpoint, project = resolve_endpoint(None)
    client = LxdClient(endpoint, project=project)
    try:
        facts = node_facts(node, files, client, repo)
        plan = make_plan(facts, to, pin_kernel, fix_mismatched)
        if not yes:
            _show_plan(node, _with_installer_notes(repo, plan), as_json)
            return None
        services = {g.name: g.services for g in facts.guests}
        _verify_installers(repo, plan)
        host.preflight(plan)
        upgrade = Upgrade(plan, files, repo, client, _progress(as_json), host=host)
        upgrade.lock_wait = lock_wait
        return upgrade.run(services)
    finally:
        client.close()


def _pve_upgrade(node: str, here: Node, repo: Path, node_data: dict[str, Any], to: str | None, pin_kernel: bool,
                 fix_mismatched: bool, yes: bool, as_json: bool, lock_wait: float, host: NodeHost,
                 inventory: Path, api_mode: str = state.HTTPS) -> Outcome | None:
    from labwright.guests.proxmox_api import Credentials, connect
    from labwright.hostupgrade.pve import PveUpgrade, make_pve_plan, nvidia_majors, pve_node_facts, pve_saved

    api = connect(Credentials.from_env(), node, node_data)
    facts, guests = pve_node_facts(node, here.files, api, repo)
    plan = make_pve_plan(facts, guests, to, pin_kernel, nvidia_majors(here.gpu_host()), fix_mismatched)
    if not yes:
        _show_plan(node, _with_installer_notes(repo, plan), as_json)
        return None
    _verify_installers(repo, plan)
    host.preflight(plan)
    upgrade = PveUpgrade(plan, here.files, repo, api, guests, _progress(as_json), host=host)
    upgrade.lock_wait = lock_wait
    upgrade.saved = pve_saved(upgrade, inventory.resolve(), api_mode)
    return upgrade.run({})
