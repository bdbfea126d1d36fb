"""The main job in one command: `pyinfra INVENTORY deploys/tabbyapi.py` on an inventory whose guest does not exist yet.

Side by side, on the local test lab, with the tabbyAPI STAND-IN (support.tabbyapi_standin, served over git HTTP) and
stand-in engine stacks (support.stacks) mounted into the guest from this machine, as tests/integration/test_main_job.py:

- one command: the @lxd connector creates the declared guest, then the deploy runs into it;
- the no-change re-run of the same command (nothing created, every operation a no-op);
- the two-step way it replaces: `pyinfra @local deploys/guest.py` (create the guest), then the deploy.

    .venv/bin/python benchmarks/main_job.py [--rounds 2]

Prints each time and the ratios (no-change / first run, one command / two steps).
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.testing.lab_fixture import TEMPLATE, Lab, ensure_test_lab
from labwright.testing.pyinfra_output import tool_env
from support.stacks import build_standin_stacks
from support.tabbyapi_lab import MODEL_NAME, WHEELHOUSE, RepoServer, bridge_address, lab_subnet
from support.tabbyapi_standin import build_standin_repo

REPO = Path(__file__).resolve().parents[1]
PYINFRA = str(Path(sys.executable).parent / "pyinfra")


def run(*args: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run([PYINFRA, "-y", *args], cwd=REPO, capture_output=True, text=True, env={**tool_env(), **env},
                          timeout=900)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr)[-3000:]
        raise SystemExit(f"pyinfra {' '.join(args)} failed (exit {proc.returncode}):\n{output}")
    return took


def shared(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


def inventory_for(lab: Lab, work: Path, name: str, git_url: str, wheelhouse: Path, models: Path) -> Path:
    guest = {"backend": "lxd", "clone": TEMPLATE, "profiles": [lab.spec.profile], "memory": "1GiB",
             "mounts": [{"host": str(wheelhouse), "guest": WHEELHOUSE, "readonly": True},
                        {"host": str(models), "guest": "/srv/models", "readonly": True}]}
    data = {"guest": guest, "stack": "standin-2.9", "tabbyapi_git_url": git_url, "tabbyapi_ref": "config-era",
            "tabbyapi_model_dir": "/srv/models", "tabbyapi_model_name": MODEL_NAME, "tabbyapi_cache_size": 4096,
            "tabbyapi_max_seq_len": 4096, "tabbyapi_wheelhouse": WHEELHOUSE, "tabbyapi_health_timeout": 60,
            "tabbyapi_gpu": "off"}
    path = work / f"{name}.py"
    path.write_text(f"gpu_guests = [(\"@lxd/{name}\", {data!r})]\n")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    lab = ensure_test_lab()
    work = Path(f"/tmp/labwright-bench-main-{os.getpid()}")
    shared(work)
    stacks = build_standin_stacks(work / "stacks")
    wheelhouse, models = shared(work / "wheelhouse"), shared(work / "models")
    shared(models / MODEL_NAME)
    for wheel in stacks.wheelhouse.glob("*.whl"):
        (wheelhouse / wheel.name).write_bytes(wheel.read_bytes())
        (wheelhouse / wheel.name).chmod(0o644)
    env = {"LABWRIGHT_MATRIX_DIR": str(stacks.matrix_dir)}
    repo = build_standin_repo(work / "standin" / "tabbyAPI")
    one, again, two = [], [], []
    made: list[str] = []
    try:
        with RepoServer(repo, bridge_address(lab_subnet())) as server:
            for _ in range(args.rounds):
                name = f"lwbench-{secrets.token_hex(3)}"
                made.append(name)
                inventory = inventory_for(lab, work, name, server.url, wheelhouse, models)
                one.append(run(str(inventory), "deploys/tabbyapi.py", env=env))
                again.append(run(str(inventory), "deploys/tabbyapi.py", env=env))
                name = f"lwbench-{secrets.token_hex(3)}"
                made.append(name)
                inventory = inventory_for(lab, work, name, server.url, wheelhouse, models)
                step1 = run("@local", "deploys/guest.py", "--data", f"guests_inventory={inventory}", env=env)
                two.append(step1 + run(str(inventory), "deploys/tabbyapi.py", env=env))
    finally:
        for name in made:
            lab.remove(name)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    first, rerun, steps = statistics.median(one), statistics.median(again), statistics.median(two)
    print(f"main job, median of {args.rounds} (tabbyAPI stand-in, stand-in stacks, guest cloned from the lab template)")
    print(f"  one command, guest created + deployed   {first:7.1f} s")
    print(f"  same command again (no change)          {rerun:7.1f} s   {rerun / first:5.2f}x of the first run")
    print(f"  two steps: deploys/guest.py, then deploy {steps:7.1f} s   one command = {first / steps:4.2f}x of it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
