"""Snapshots wired into the deploys' risky steps, on the real local LXD lab (the test lab's ``dir`` pool).

- stack switch (deploys/stack.py over @lxd, the stand-in stacks and service of support.stacks/support.stack_service):
  a switch leaves exactly one new labwright snapshot, taken before the change; a no-change re-run takes none;
  ``snapshot_before=false`` takes none; the guest broken after the switch and put back with ``labwright guest
  restore`` runs its old stack again and passes the checks;
- package installs (labwright.deploys.common.install_missing, here through deploys/model.py's apt step) and a
  ``snapshot_*`` typo refused before anything runs;
- tabbyAPI ref change (deploys/tabbyapi.py with the stand-in tabbyAPI of support.tabbyapi_lab): a first install takes
  one snapshot (before its packages), a ref change one more, a re-run none; restoring the ref-change snapshot puts the
  guest back on the old ref and the shipped verify suite passes.

What is checked is what LXD lists and what the guest has afterwards, never only what a deploy said.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright import snapshots
from labwright.lab.lab import wait_ready
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import pyinfra_totals, run_pyinfra, tool_env
from labwright.testing.waiting import wait_for
from support.stack_service import StandinService
from support.stacks import StandinStacks, build_standin_stacks
from support.tabbyapi_lab import (
    SOURCE,
    TabbyGuest,
    deployed_guest,
)
from support.tabbyapi_standin import build_standin_repo

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
LABWRIGHT = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "labwright")


def ours(lab: Lab, name: str) -> list[str]:
    """labwright's snapshots of the guest, oldest first, as the LXD daemon lists them."""
    return [s.name for s in snapshots.list_snapshots(f"@lxd/{name}", client=lab.client) if s.ours]


def restore_cli(name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LABWRIGHT, "guest", "restore", f"@lxd/{name}", "--force", "-y"], cwd=REPO,
                          env=tool_env(), capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> StandinStacks:
    return build_standin_stacks(tmp_path_factory.mktemp("standin"))


@pytest.fixture
def service(lab: Lab, make_lab_container, stacks) -> StandinService:
    service = StandinService(lab.client, make_lab_container("lwsnw"), stacks)
    service.push_wheelhouse()
    service.install("standin-2.9")  # a plain venv, as a tabbyAPI install leaves it
    return service


def test_stack_switch_snapshots_once_a_rerun_none_and_restore_brings_the_old_stack_back(lab, service):
    guest = service.name
    assert ours(lab, guest) == []

    first = service.deploy(stack="standin-2.10")

    assert first.rc == 0, first.output[-3000:]
    assert pyinfra_totals(first.output).changed == 1  # the snapshot is part of the switch, not an operation
    taken = ours(lab, guest)
    assert len(taken) == 1 and taken[0].startswith("labwright-stack-switch-"), taken
    assert service.health() == (200, {"torch": "2.10.0", "prefix": service.venv})

    again = service.deploy(stack="standin-2.10")
    assert again.rc == 0 and pyinfra_totals(again.output).changed == 0, again.output[-3000:]
    assert ours(lab, guest) == taken  # a no-change run takes none

    off = service.deploy(stack="standin-2.9", snapshot_before="false")
    assert off.rc == 0, off.output[-3000:]
    assert service.health()[1].get("torch") == "2.9.0"
    assert ours(lab, guest) == taken  # switched, without a snapshot

    # Break the guest after the snapshot: a half-done change (tar's binary gone, the venv link removed).
    service.sh(f"rm /usr/bin/tar {service.venv}")
    restored = restore_cli(guest)
    assert restored.returncode == 0, restored.stderr
    wait_ready(lab.client, guest)
    # As it was before the first switch: the plain venv on stack 2.9, tar intact; the stand-in unit has no
    # [Install], so it is started by hand after the guest's restart.
    service.sh("dpkg --verify tar && tar --version >/dev/null")
    assert service.readlink() == "NOT-A-LINK"
    service.sh(f"systemctl start {service.unit}")
    wait_for(f"{service.unit} /health 200 after the restore", lambda: service.health()[0] == 200, timeout=60,
             every=0.2)
    assert service.health() == (200, {"torch": "2.9.0", "prefix": service.venv})
    assert ours(lab, guest) == taken  # restoring keeps the snapshot


def test_a_snapshot_typo_is_one_line_before_anything_runs(lab, lab_container):
    run = run_pyinfra(f"@lxd/{lab_container}", "deploys/model.py", "model_repo=lab/tiny", "snapshot_kep=2",
                      cwd=REPO, timeout=600)
    assert run.rc != 0
    hits = [line for line in run.output.splitlines() if "snapshot_kep" in line]
    assert hits and "did you mean snapshot_keep?" in hits[0], run.output[-3000:]
    assert "Traceback" not in run.output and "Starting operation" not in run.output, run.output[-3000:]
    assert ours(lab, lab_container) == []


@pytest.fixture(scope="module")
def tabby(lab: Lab, stacks: StandinStacks, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TabbyGuest]:
    repo = build_standin_repo(tmp_path_factory.mktemp("standin-tabby") / "tabbyAPI")
    with deployed_guest(lab, stacks, repo, "lwsnt") as guest:
        yield guest


VERIFY_ENV = {"LABWRIGHT_TABBYAPI_MODEL_NAME": "standin-model", "LABWRIGHT_TABBYAPI_CACHE_SIZE": "4096",
              "LABWRIGHT_TABBYAPI_MAX_SEQ_LEN": "4096"}


def test_tabbyapi_ref_change_snapshots_and_restore_puts_the_old_ref_back(lab, tabby):
    first = tabby.first
    assert first.rc == 0, first.output[-4000:]
    installed = ours(lab, tabby.name)
    # The first install snapshots once, before its packages (git); the stack and the first checkout take none.
    assert len(installed) == 1 and installed[0].startswith("labwright-packages-"), installed
    seed_head = tabby.head()

    change = tabby.deploy(tabbyapi_ref="config-era")

    assert change.rc == 0, change.output[-4000:]
    after = ours(lab, tabby.name)
    assert after[:-1] == installed and after[-1].startswith("labwright-tabbyapi-ref-"), after
    assert tabby.head() != seed_head
    again = tabby.deploy(tabbyapi_ref="config-era")
    assert again.rc == 0 and again.totals.changed == 0, again.output[-4000:]
    assert ours(lab, tabby.name) == after

    tabby.sh(f"rm {SOURCE}/config.yml /usr/bin/tar")  # broken after the snapshot
    restored = restore_cli(tabby.name)
    assert restored.returncode == 0, restored.stderr
    wait_ready(lab.client, tabby.name)
    assert tabby.head() == seed_head
    tabby.sh("dpkg --verify tar")
    wait_for("tabbyAPI /health 200 after the restore", lambda: tabby.health() == 200, timeout=120, every=0.5)
    verify = tabby.verify(env=VERIFY_ENV)
    assert verify.returncode == 0, verify.stdout[-4000:]
    started = time.monotonic()
    back = tabby.deploy()  # the restored guest is the seed-era deploy: nothing to change
    assert back.rc == 0 and back.totals.changed == 0, back.output[-4000:]
    print(f"\nno-change deploy after the restore: {time.monotonic() - started:.1f}s")
