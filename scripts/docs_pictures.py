"""Render the pictures in docs/img/ from real runs on the local LXD lab (run by scripts/docs-pictures).

Parts (default: all of them, in this order):

- ``bench``: llama-server deployed into a lab container by deploys/llamacpp.py (tests/support/probe_box.llama_box: the
  tiny generated GGUF, 8,192 context, the production flags), measured by ``labwright bench llm`` over the lab bridge
  as configuration A (q4_0 K/V cache, flash attention on: the production flags), then redeployed as configuration B
  (f16 K/V cache, flash attention off) and measured again; ``labwright bench compare`` draws both side by side.
  Writes docs/img/bench-llm.png (A alone), docs/img/bench-compare.png (A against B) and the two JSON results.
- ``plan``: a guest made with ``labwright guest apply`` on the lab, then its inventory edited (more memory, another
  core, a mount) and a second guest declared; the real ``labwright guest plan`` output is recorded with rich's
  ``Console(record=True)`` and written as docs/img/guest-plan.svg.
- ``desktop``: deploys/desktop.py into a clone of the cached desktop install (tests/support/desktop.py), then a real
  RDP client (xfreerdp under Xvfb) logs in and ImageMagick's ``import`` takes docs/img/desktop-rdp.png.

Each part records the command it ran, the date and the machine in docs/img/pictures.json; the docs quote them under
each picture. Containers made here are removed at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMG = REPO / "docs" / "img"
RECORD = IMG / "pictures.json"
sys.path.insert(0, str(REPO / "tests"))  # tests/support: the lab's llama-server box and the RDP client

from labwright.lab.lab import instance_address  # noqa: E402
from labwright.testing.lab_fixture import Lab, ensure_test_lab  # noqa: E402
from labwright.testing.pyinfra_output import run_pyinfra, tool_env  # noqa: E402
from labwright.testing.waiting import wait_for  # noqa: E402

LABWRIGHT = str(Path(sys.executable).parent / "labwright")
CONTEXTS = "256,512,1024,2048,4096"
DECODE = 64
TRIALS = 3
ROUNDS = 2  # A, B, A, B
CONFIG_A: tuple[str, list[str]] = ("A: q4_0 KV, flash-attn on", [])
CONFIG_B: tuple[str, list[str]] = ("B: f16 KV, flash-attn off", [
    "llamacpp_cache_type_k=f16", "llamacpp_cache_type_v=f16", "llamacpp_flash_attn=off"])


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def machine() -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    memory_kib = int(Path("/proc/meminfo").read_text().split()[1])
    load = os.getloadavg()[0]
    return (f"{platform.node()}: {os.cpu_count()} x {cpu}, {memory_kib / 2**20:.0f} GiB RAM, no GPU, "
            f"{platform.system()} {platform.release()}; 1-minute load average {load:.1f} as it finished")


def record(picture: str, commands: list[str], started: float, **extra: object) -> None:
    """Note in docs/img/pictures.json how ``picture`` was made (the docs quote it under the picture)."""
    done = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    done[picture] = {"commands": commands,
                     "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                     "seconds": round(time.monotonic() - started, 1), "machine": machine(), **extra}
    RECORD.write_text(json.dumps(done, indent=2) + "\n")


def run(cmd: list[str], timeout: float = 1800, stdout_to: Path | None = None) -> str:
    log("$ " + shlex.join(cmd))
    proc = subprocess.run(cmd, cwd=REPO, env=tool_env(), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    if stdout_to is not None:
        stdout_to.write_text(proc.stdout)
    return proc.stdout


def display(cmd: list[str]) -> str:
    """The command as the docs show it: `labwright ...` and paths relative to the repository."""
    words = ["labwright" if word == LABWRIGHT else word.replace(str(REPO) + "/", "") for word in cmd]
    return shlex.join(words)


# --- bench ------------------------------------------------------------------------------------------
def bench(lab: Lab) -> None:
    """A, B, A, B, ...: the rounds interleave so that both configurations see the same (shared, busy) machine."""
    from support.probe_box import MODEL, llama_box

    started = time.monotonic()
    commands: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lwdocs-") as work:
        name, _ = llama_box(lab, Path(work), prefix="lwdocs", memory="1GiB")  # deployed as configuration A
        try:
            address = instance_address(lab.client, name)
            if not address:
                raise SystemExit(f"lab container {name} has no address")
            url = f"http://{address}:8001/v1"
            results: list[Path] = []
            command_lines: dict[str, str] = {}
            deployed = CONFIG_A[0]
            for round_number in range(1, ROUNDS + 1):
                for label, data in (CONFIG_A, CONFIG_B):
                    if label != deployed:
                        words = [f"llamacpp_model={MODEL}", "llamacpp_ctx_size=8192", *data]
                        deploy = ["pyinfra", "-y", f"@lxd/{name}", "deploys/llamacpp.py",
                                  *[w for item in words for w in ("--data", item)]]
                        log("$ " + shlex.join(deploy))
                        redeploy = run_pyinfra(f"@lxd/{name}", "deploys/llamacpp.py", *words, cwd=REPO, timeout=900)
                        if redeploy.rc != 0:
                            raise SystemExit(f"redeploying {name} as {label!r} failed:\n{redeploy.output[-3000:]}")
                        commands.append(shlex.join(deploy).replace(name, "GUEST"))
                        deployed = label
                    unit = lab.client.exec(name, ["systemctl", "show", "-p", "ExecStart", "--value", "llama-server"])
                    # What the server really ran with: the A/B differs in these flags and nothing else.
                    command_lines[label] = unit.stdout.decode().split("argv[]=", 1)[-1].split(" ;", 1)[0]
                    # The engine answers with its key only (generated on the guest by the deploy): read it there.
                    key = lab.client.exec(name, ["cat", "/etc/llama-server/api-key"])
                    os.environ["LW_LLAMA_KEY"] = key.stdout.decode().strip()
                    slug = label.split(":")[0].lower() + str(round_number)
                    saved = IMG / f"bench-{slug}.json"
                    cmd = [LABWRIGHT, "bench", "llm", "--url", url, "--contexts", CONTEXTS, "--decode", str(DECODE),
                           "--trials", str(TRIALS), "--label", f"{label} (run {round_number})",
                           "--api-key-env", "LW_LLAMA_KEY", "--json"]
                    if slug == "a1":
                        cmd += ["--plot", str(IMG / "bench-llm.png")]
                    run(cmd, stdout_to=saved)
                    commands.append(display(cmd).replace(address, "GUEST") + f" > docs/img/{saved.name}")
                    results.append(saved)
            compare = [LABWRIGHT, "bench", "compare", *map(str, results), "--plot", str(IMG / "bench-compare.png")]
            table = run(compare)
            commands.append(display(compare))
        finally:
            lab.remove(name)
    note = ("llama-server (llama.cpp, the pinned build) in an LXD container of the test lab (limits.memory=1GiB), "
            "deployed by deploys/llamacpp.py with the tiny generated GGUF (labwright.llamacpp.tiny_model, "
            "random weights, 4 layers); measured over the lab bridge from the host")
    record("bench-llm.png", commands[:1], started, setup=note, servers=command_lines)
    record("bench-compare.png", commands, started, setup=note, table=table, servers=command_lines)
    log(table)


# --- guest plan -------------------------------------------------------------------------------------
def inventory_text(lab: Lab, web: str, db: str, edited: bool) -> str:
    web_guest: dict[str, object] = {"backend": "lxd", "clone": "lwtest-template", "profiles": [lab.spec.profile],
                                    "cores": 1, "memory": "512MiB"}
    if edited:
        web_guest.update(cores=2, memory="1GiB", features={"nesting": True},
                         mounts=[{"host": "/srv/models", "guest": "/models", "readonly": True}])
    hosts = [(f"@lxd/{web}", {"guest": web_guest})]
    if edited:
        hosts.append((f"@lxd/{db}", {"guest": {"backend": "lxd", "clone": "lwtest-template",
                                               "profiles": [lab.spec.profile], "cores": 2, "memory": "2GiB"}}))
    return f"guests = {hosts!r}\n"


def guest_plan(lab: Lab) -> None:
    from rich.console import Console
    from rich.text import Text

    started = time.monotonic()
    models = Path("/srv/models")  # the mount's host side must exist for the plan to accept it
    made_models = not models.exists()
    models.mkdir(parents=True, exist_ok=True)
    web, db = "docs-web1", "docs-db1"  # names the picture shows; left over from an interrupted run: removed first
    for name in (web, db):
        lab.remove(name)
    with tempfile.TemporaryDirectory(prefix="lwdocs-") as work:
        inventory = Path(work) / "guests.py"
        try:
            inventory.write_text(inventory_text(lab, web, db, edited=False))
            run([LABWRIGHT, "guest", "apply", "-i", str(inventory)], timeout=600)
            inventory.write_text(inventory_text(lab, web, db, edited=True))
            cmd = [LABWRIGHT, "guest", "plan", "-i", str(inventory)]
            output = run(cmd, timeout=600)
        finally:
            for name in (web, db):
                lab.remove(name)
            if made_models:
                models.rmdir()
    shown = "labwright guest plan -i guests.py"
    console = Console(record=True, width=100, file=open(os.devnull, "w"))  # noqa: SIM115 (closed with the process)
    console.print(Text("$ " + shown, style="bold"))
    for line in output.rstrip("\n").splitlines():
        stripped = line.lstrip()
        style = {"+": "green", "~": "yellow", "-": "red"}.get(stripped[:1], "bold" if not line.startswith(" ") else "")
        console.print(Text(line, style=style))
    (IMG / "guest-plan.svg").write_text(console.export_svg(title=shown))
    record("guest-plan.svg", [shown], started, output=output,
           inventory_before=inventory_text(lab, web, db, edited=False),
           inventory_after=inventory_text(lab, web, db, edited=True))
    log(output)


# --- desktop over RDP -------------------------------------------------------------------------------
def desktop(lab: Lab) -> None:
    from labwright.desktop.recipe import PASSWORD_ENV
    from support.desktop import ensure_cache, make_guest, png_pixels, rdp_client, xvfb

    started = time.monotonic()
    cache, _ = ensure_cache(lab, log=log)
    name = f"lwdocs-desk-{int(time.time()) % 100000}"
    user, password = "desk", "Docs-" + os.urandom(6).hex()
    deploy = ["pyinfra", "-y", f"@lxd/{name}", "deploys/desktop.py", "--data", "desktop_firefox_source=debian-esr"]
    try:
        make_guest(lab, name, cache)
        os.environ[PASSWORD_ENV] = password
        log("$ " + shlex.join(deploy))
        done = run_pyinfra(f"@lxd/{name}", "deploys/desktop.py", "desktop_firefox_source=debian-esr", cwd=REPO,
                           timeout=1200)
        if done.rc != 0:
            raise SystemExit(f"deploying the desktop into {name} failed:\n{done.output[-3000:]}")
        address = instance_address(lab.client, name) or ""
        shot = IMG / "desktop-rdp.png"
        with tempfile.TemporaryDirectory(prefix="lwdocs-") as work, xvfb(1024, 768) as screen, \
                rdp_client(screen, address, user, password, Path(work) / "rdp.log") as rdp:
            previous: list[bytes] = [b""]

            def painted_and_still() -> bool:
                """The MATE panel is drawn and the screen is what it was a second ago (applets finish drawing
                after the panel itself, so the first painted frame can be half done)."""
                data = rdp.screenshot(shot).read_bytes()
                width, _, pixels = png_pixels(data)
                top_bar = [pixels[8 * width + x] for x in range(200, 800)]
                greys = sum(1 for p in top_bar if min(p) > 180 and max(p) - min(p) < 20)
                still, previous[0] = data == previous[0], data
                return greys > 300 and len(set(pixels[::97])) > 50 and still

            wait_for("the MATE panel drawn and still in the RDP session", painted_and_still, timeout=180, every=1)
    finally:
        os.environ.pop(PASSWORD_ENV, None)
        lab.remove(name)
    rdp_cmd = f"xfreerdp /v:{'GUEST'}:3389 /u:{user} /from-stdin:force /cert:ignore /size:1024x768"
    record("desktop-rdp.png", [shlex.join(deploy).replace(name, "GUEST"), rdp_cmd,
                               "import -display :N -window root PNG24:docs/img/desktop-rdp.png"], started)


PARTS: dict[str, Callable[[Lab], None]] = {"bench": bench, "plan": guest_plan, "desktop": desktop}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", metavar="PART", help=f"what to render: {', '.join(PARTS)} (default: all)")
    args = parser.parse_args()
    unknown = [part for part in args.parts if part not in PARTS]
    if unknown:
        print(f"unknown part {unknown[0]!r}: pass one of {', '.join(PARTS)}, or nothing for all", file=sys.stderr)
        raise SystemExit(2)
    IMG.mkdir(parents=True, exist_ok=True)
    lab = ensure_test_lab()
    for part in args.parts or list(PARTS):
        log(f"--- {part}")
        PARTS[part](lab)


if __name__ == "__main__":
    main()
