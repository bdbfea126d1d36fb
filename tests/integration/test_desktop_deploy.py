"""deploys/desktop.py for real: a desktop guest made through the guest model, a REAL RDP client, a real Firefox.

The guest is a clone (guest model ``clone:``, unprivileged, nesting) of the cached package install
(support.desktop: one full install per recipe, kept as a stopped lab container, so a warm re-run copies
it in seconds). The deploy then does every configuration step a first deploy does. ``xfreerdp`` (FreeRDP 2)
runs under Xvfb on this machine and connects to the guest's address on the lab bridge; Firefox is Debian's
firefox-esr through the deploy's ``desktop_firefox_source=debian-esr`` path (Mozilla's repository is not reachable
here). The shipped verify suite and `labwright desktop check` run as users run them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labwright import snapshots
from labwright.desktop import password as passwords
from labwright.desktop.recipe import PASSWORD_ENV
from labwright.lab.lab import instance_address, wait_ready
from labwright.testing.lab_fixture import TEMPLATE, Lab
from labwright.testing.pyinfra_output import Deployed, DeployRun, run_pyinfra, tool_env
from support import guest_apt
from support.desktop import ensure_cache, make_guest, png_pixels, rdp_client, xvfb
from support.verify_run import run_verify

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
USER = "desk"
PASSWORD = "Lab-desktop-" + str(int(time.time()))[-6:]
ESR = "desktop_firefox_source=debian-esr"
SESMAN_LOG = "/var/log/xrdp-sesman.log"
LABWRIGHT = str(Path(sys.executable).parent / "labwright")


def deploy(name: str, *data: str, password: str | None = PASSWORD) -> DeployRun:
    """The deploy with the password in the environment as an operator gives it (None: unset, so one is generated)."""
    saved = os.environ.pop(PASSWORD_ENV, None)
    if password is not None:
        os.environ[PASSWORD_ENV] = password
    try:
        return run_pyinfra(f"@lxd/{name}", "deploys/desktop.py", ESR, *data, cwd=REPO, timeout=1200)
    finally:
        os.environ.pop(PASSWORD_ENV, None)
        if saved is not None:
            os.environ[PASSWORD_ENV] = saved


def verify(name: str) -> subprocess.CompletedProcess[str]:
    """The shipped testinfra suite, as a user's install runs it (support.verify_run)."""
    return run_verify("desktop", f"lxc://{name}")


def check_cli(name: str) -> tuple[int, dict]:
    proc = subprocess.run([LABWRIGHT, "desktop", "check", name, "--json"], cwd=REPO,
                          env=tool_env(), capture_output=True, text=True, timeout=120)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {"raw": proc.stderr}


def sh(lab: Lab, name: str, script: str) -> str:
    result = lab.client.exec(name, ["sh", "-c", script])
    assert result.exit_code == 0, f"{script!r} failed: {result.stderr.decode()}"
    return result.stdout.decode()


def wait_for(lab: Lab, name: str, script: str, timeout: float = 30) -> float:
    """Seconds until ``script`` succeeds in the guest; fails the test after ``timeout``."""
    start = time.monotonic()
    while lab.client.exec(name, ["sh", "-c", script]).exit_code != 0:
        assert time.monotonic() - start < timeout, f"{script!r} did not succeed within {timeout}s"
        time.sleep(0.2)
    return time.monotonic() - start


@pytest.fixture(scope="module")
def desktop_cache(lab: Lab) -> str:
    started = time.monotonic()
    name, built = ensure_cache(lab)
    how = f"built ({built.seconds:.0f}s deploy, packages stage)" if built else "reused"
    print(f"\ndesktop cache {name} {how} in {time.monotonic() - started:.1f}s")
    return name


@pytest.fixture(scope="module")
def deployed(lab: Lab, desktop_cache: str):
    """One guest cloned from the cache through the guest model, verified before and deployed once."""
    name = f"lwdesk-{secrets.token_hex(3)}"  # random: two runs (or workers) never share a name
    try:
        make_guest(lab, name, desktop_cache)
        before = verify(name)
        first = deploy(name)
        assert first.rc == 0, first.output[-4000:]
        yield Deployed(name, instance_address(lab.client, name) or "", before, first)
    finally:
        lab.remove(name)


def test_guest_is_unprivileged_with_nesting_through_the_guest_model(lab, deployed):
    config = lab.client.instance(deployed.name)["expanded_config"]
    assert config.get("security.privileged") == "false" and config.get("security.nesting") == "true", config
    assert config.get("user.labwright.guest") == deployed.name


def test_verify_fails_before_and_passes_after_the_deploy(deployed):
    # The cache holds packages only: no user, no TLS key of its own, no MATE session, no launcher.
    assert deployed.before.returncode == 1, deployed.before.stdout[-3000:]
    for check in ("tls", "session", "caja", "launcher"):
        pattern = rf"FAILED \S*test_desktop.py::test_desktop\[\S+-{check}\]"
        assert re.search(pattern, deployed.before.stdout), deployed.before.stdout[-3000:]
    assert deployed.first.totals.changed > 0 and deployed.first.totals.error == 0
    print(f"\nfirst deploy on the cached install: {deployed.first.seconds:.1f}s, {deployed.first.totals.changed} "
          "changed")
    result = verify(deployed.name)
    assert result.returncode == 0, result.stdout[-4000:]


def test_second_run_changes_nothing(deployed):
    again = deploy(deployed.name)
    assert again.rc == 0, again.output[-4000:]
    assert (again.totals.changed, again.totals.error) == (0, 0), again.output[-4000:]
    print(f"\nno-change re-run: {again.seconds:.2f}s ({again.totals.no_change} operations)")


def test_a_missing_package_is_installed_after_a_snapshot_the_guest_can_be_restored_to(lab, deployed):
    # docs/snapshots.md: a desktop deploy that is about to install packages snapshots the guest first. x11-utils (a
    # leaf of the recipe) is removed behind the deploy's back; the next run puts it back, after a snapshot taken
    # before any package changed (the guest at that moment: without x11-utils).
    sh(lab, deployed.name, guest_apt.dpkg("-r --force-depends x11-utils") + " >/dev/null")
    before = set(snapshot_names(lab, deployed.name))
    run = deploy(deployed.name)
    assert run.rc == 0, run.output[-4000:]
    taken = sorted(set(snapshot_names(lab, deployed.name)) - before)
    assert len(taken) == 1 and taken[0].startswith("labwright-desktop-"), taken
    assert "Snapshot before the desktop packages" in run.output
    sh(lab, deployed.name, "dpkg -s x11-utils | grep -q '^Status: install ok installed'")
    again = deploy(deployed.name)
    assert (again.rc, again.totals.changed) == (0, 0), again.output[-4000:]
    assert sorted(set(snapshot_names(lab, deployed.name)) - before) == taken  # nothing to install: no snapshot


def snapshot_names(lab: Lab, name: str) -> list[str]:
    return [s.name for s in snapshots.list_snapshots(f"@lxd/{name}", client=lab.client)]


def test_a_real_rdp_client_logs_in_to_a_mate_session(lab, deployed, tmp_path):
    sh(lab, deployed.name, f": > {SESMAN_LOG}")
    with xvfb() as display, rdp_client(display, deployed.address, USER, PASSWORD, tmp_path / "rdp.log") as rdp:
        started = wait_for(lab, deployed.name, f"grep -q 'Session started successfully for user {USER}' {SESMAN_LOG}")
        panel = wait_for(lab, deployed.name, f"pgrep -u {USER} -x mate-panel")
        log = sh(lab, deployed.name, f"cat {SESMAN_LOG}")
        number = re.search(rf"Session started successfully for user {USER} on display (\d+)", log).group(1)
        tree = f"runuser -u {USER} -- env DISPLAY=:{number} xwininfo -root -tree"
        visible = wait_for(lab, deployed.name, f"{tree} | grep -q '\"Top Panel\"'")
        shot = wait_painted(rdp, tmp_path / "rdp.png")
    print(f"\nRDP: session started {started:.1f}s, mate-panel {panel:.1f}s, Top Panel mapped "
          f"{started + panel + visible:.1f}s after the client started; screenshot {shot}")
    assert "TLS connection established" in sh(lab, deployed.name, "tail -n 50 /var/log/xrdp.log")
    session_colours, top_bar = painted(shot)
    assert session_colours > 50, "the session area is (nearly) one colour: no desktop was drawn"
    assert sum(1 for p in top_bar if min(p) > 180 and max(p) - min(p) < 20) > 300, top_bar[:10]


def painted(shot: Path) -> tuple[int, list[tuple[int, int, int]]]:
    """(distinct colours in the session area, the pixels of the top panel's row) of an RDP screenshot. The 1024x768
    session fills the top-left of the Xvfb screen: MATE's panels are light grey bars, and the desktop is not one flat
    colour (xrdp's login screen is mostly its teal background)."""
    width, _height, pixels = png_pixels(shot.read_bytes())
    session = {pixels[y * width + x] for y in range(0, 768, 4) for x in range(0, 1024, 4)}
    return len(session), [pixels[8 * width + x] for x in range(200, 800)]


def wait_painted(rdp, path: Path, timeout: float = 30) -> Path:
    """Screenshots until the panel row is painted (mapped is not yet drawn); the last one, whatever it shows, after
    ``timeout`` (the test's assertions then say what is missing)."""
    deadline = time.monotonic() + timeout
    while True:
        shot = rdp.screenshot(path)
        colours, top_bar = painted(shot)
        if (colours > 50 and sum(1 for p in top_bar if min(p) > 180 and max(p) - min(p) < 20) > 300) \
                or time.monotonic() > deadline:
            return shot


def test_a_wrong_password_is_refused(lab, deployed, tmp_path):
    sh(lab, deployed.name, f": > {SESMAN_LOG}")
    with xvfb() as display, rdp_client(display, deployed.address, USER, "not-" + PASSWORD, tmp_path / "bad.log"):
        wait_for(lab, deployed.name, f"grep -q 'AUTHFAIL: user={USER}' {SESMAN_LOG}")
    log = sh(lab, deployed.name, f"cat {SESMAN_LOG}")
    assert "pam_authenticate failed" in log or "AUTHFAIL" in log
    assert "Session started successfully" not in log


def test_firefox_renders_a_local_page_headless(lab, deployed, tmp_path):
    page = "<html><body style='margin:0;background:#1e90ff'><h1 style='color:#fff'>labwright</h1></body></html>"
    sh(lab, deployed.name, f"mkdir -p /srv/page && printf '%s' \"{page}\" > /srv/page/index.html && "
       "systemd-run --unit lw-page --collect python3 -m http.server 8000 --bind 127.0.0.1 -d /srv/page")
    try:
        wait_for(lab, deployed.name, "ss -Hltn 'sport = :8000' | grep -q LISTEN")
        sh(lab, deployed.name, f"cd /tmp && runuser -u {USER} -- timeout 120 firefox-esr --headless "
           "--window-size=800,600 --screenshot /tmp/ff.png http://127.0.0.1:8000/ >/dev/null 2>&1")
        with (tmp_path / "ff.png").open("wb") as out:
            lab.client.pull_file(deployed.name, "/tmp/ff.png", out)
    finally:
        lab.client.exec(deployed.name, ["systemctl", "stop", "lw-page"])
    width, height, pixels = png_pixels((tmp_path / "ff.png").read_bytes())
    assert (width, height) == (800, 600)
    blue = sum(1 for p in pixels if abs(p[0] - 0x1E) < 8 and abs(p[1] - 0x90) < 8 and abs(p[2] - 0xFF) < 8)
    white = sum(1 for p in pixels if min(p) > 240)
    assert blue > 0.8 * len(pixels), f"page background covers {blue} of {len(pixels)} pixels"
    assert white > 200, "no heading text drawn"


def test_desktop_check_passes_then_names_cause_and_fix_for_each_seed_symptom(lab, deployed, tmp_path):
    rc, report = check_cli(deployed.name)
    assert rc == 0 and report["ok"], report
    tls = next(c for c in report["checks"] if c["name"] == "TLS in use")
    # The RDP tests above connected over TLS (when this test runs alone, xrdp.log has no connection yet).
    connected = lab.client.exec(deployed.name, ["grep", "-q", "TLS connection established", "/var/log/xrdp.log"])
    assert ("last connection TLSv1.3" in tls["detail"]) == (connected.exit_code == 0), tls
    home = f"/home/{USER}"
    # Break what the seed's table lists. Chrome cannot be installed here: a stand-in google-chrome-stable on PATH.
    sh(lab, deployed.name, f"rm -rf {home}/.config/caja && printf 'exec startxfce4\\n' > {home}/.xsession && "
       "printf '#!/bin/sh\\n' > /usr/local/bin/google-chrome-stable && chmod 755 /usr/local/bin/google-chrome-stable "
       "&& mv /usr/lib/xorg/Xorg /usr/lib/xorg/Xorg.lw-hidden")
    try:
        # The grey screen for real: a new RDP login while Xorg is missing; sesman cannot start the X server.
        sh(lab, deployed.name, f"pkill -KILL -u {USER}; true")
        # gone before the log is emptied: nothing of theirs lands in it
        wait_for(lab, deployed.name, f"! pgrep -u {USER}")
        sh(lab, deployed.name, f": > {SESMAN_LOG}")
        with xvfb() as display, rdp_client(display, deployed.address, USER, PASSWORD, tmp_path / "grey.log"):
            wait_for(lab, deployed.name, f"grep -q 'Error starting X server' {SESMAN_LOG}")
        assert "Session started successfully" not in sh(lab, deployed.name, f"cat {SESMAN_LOG}")
        rc, report = check_cli(deployed.name)
        failed = {c["name"]: c for c in report["checks"] if not c["ok"]}
        assert rc == 1 and set(failed) == {"caja config dir", "MATE session", "no Chrome",
                                           "Xorg backend (no grey screen)"}, failed
        assert "caja complains" in failed["caja config dir"]["cause"]
        assert "mkdir -p" in failed["caja config dir"]["fix"]
        assert "trusted" in failed["MATE session"]["cause"] and "mate-session" in failed["MATE session"]["fix"]
        assert "offline" in failed["no Chrome"]["cause"] and "Firefox" in failed["no Chrome"]["fix"]
        assert "grey screen" in failed["Xorg backend (no grey screen)"]["cause"]
        assert "xorgxrdp" in failed["Xorg backend (no grey screen)"]["fix"]
        assert "'Error starting X server' line(s)" in failed["Xorg backend (no grey screen)"]["detail"]
        text = subprocess.run([LABWRIGHT, "desktop", "check", deployed.name], cwd=REPO,
                              env={**tool_env(), "COLUMNS": "250"}, capture_output=True, text=True, timeout=120)
        assert text.returncode == 1 and "8/12 checks passed" in text.stdout, text.stdout
    finally:
        sh(lab, deployed.name, "rm -f /usr/local/bin/google-chrome-stable; "
           "mv /usr/lib/xorg/Xorg.lw-hidden /usr/lib/xorg/Xorg")
    repaired = deploy(deployed.name)  # the deploy puts back what it owns: ~/.config/caja and the MATE session
    assert repaired.rc == 0 and repaired.totals.changed == 2, repaired.output[-3000:]
    rc, report = check_cli(deployed.name)
    assert rc == 0, report


def test_loopback_listen_then_back_to_lan(lab, deployed):
    local = deploy(deployed.name, "desktop_listen=127.0.0.1")
    assert local.rc == 0 and local.totals.changed >= 2, local.output[-3000:]  # xrdp.ini, restart, record
    listeners = sh(lab, deployed.name, "ss -Hltn 'sport = :3389'")
    assert "127.0.0.1:3389" in listeners and "*:3389" not in listeners, listeners
    rc, report = check_cli(deployed.name)
    assert rc == 0, report
    back = deploy(deployed.name)
    assert back.rc == 0 and back.totals.changed >= 2, back.output[-3000:]
    assert "*:3389" in sh(lab, deployed.name, "ss -Hltn 'sport = :3389'")


def test_generated_password_is_never_printed_kept_root_only_and_is_the_users(lab, deployed):
    first = deploy(deployed.name, "desktop_user=anna", password=None)
    assert first.rc == 0, first.output[-3000:]
    kept = "/root/labwright-desktop-password-anna"
    found = [line for line in first.output.splitlines() if "desktop user anna: generated password in " in line]
    assert len(found) == 1 and kept in found[0] and f"lxc exec {deployed.name} -- cat {kept}" in found[0], \
        first.output[-3000:]
    generated = sh(lab, deployed.name, f"cat {kept}").strip()
    assert len(generated) == 16 and generated.isalnum()
    assert generated not in first.output, "the generated password was printed"
    assert sh(lab, deployed.name, f"stat -c '%a %U %G' {kept}") == "600 root root\n"
    shadow = sh(lab, deployed.name, "getent shadow anna | cut -d: -f2").strip()
    assert passwords.matches(generated, shadow), "the kept password is not the one set"
    assert shadow not in first.output
    stored = lab.client.exec(deployed.name, ["grep", "-rlF", generated, "/etc", "/home", "/root", "/var/log"])
    assert stored.stdout.decode().split() == [kept], f"the password is also in {stored.stdout.decode()}"
    again = deploy(deployed.name, "desktop_user=anna", password=None)
    assert again.rc == 0 and again.totals.changed == 0, again.output[-3000:]
    assert "generated password" not in again.output
    assert sh(lab, deployed.name, "getent shadow anna | cut -d: -f2").strip() == shadow
    # A chosen password replaces it, and the kept file (no longer the password) goes.
    chosen = deploy(deployed.name, "desktop_user=anna", password=PASSWORD)
    assert chosen.rc == 0 and chosen.totals.changed == 1, chosen.output[-3000:]
    assert passwords.matches(PASSWORD, sh(lab, deployed.name, "getent shadow anna | cut -d: -f2").strip())
    assert lab.client.exec(deployed.name, ["test", "-e", kept]).exit_code == 1
    assert "$6$" not in chosen.output
    back = deploy(deployed.name)  # the record names desk again
    assert back.rc == 0 and back.totals.changed == 1, back.output[-3000:]


def test_a_changed_password_is_set_once_then_left_alone(lab, deployed):
    shadow = sh(lab, deployed.name, f"getent shadow {USER} | cut -d: -f2").strip()
    changed = deploy(deployed.name, password=PASSWORD + "-new")
    assert changed.rc == 0 and changed.totals.changed == 1, changed.output[-3000:]
    new_shadow = sh(lab, deployed.name, f"getent shadow {USER} | cut -d: -f2").strip()
    assert new_shadow != shadow and passwords.matches(PASSWORD + "-new", new_shadow)
    kept = deploy(deployed.name, password=None)  # no password given: the user's stays as it is
    assert kept.rc == 0 and kept.totals.changed == 0, kept.output[-3000:]
    back = deploy(deployed.name)
    assert back.rc == 0 and back.totals.changed == 1, back.output[-3000:]
    assert passwords.matches(PASSWORD, sh(lab, deployed.name, f"getent shadow {USER} | cut -d: -f2").strip())


# --- bad input: one line each, nothing changed (plain template containers: no install needed) ----------
def assert_refused_untouched(lab: Lab, name: str, run: DeployRun, words: str) -> None:
    assert run.rc != 0, run.output[-2000:]
    errors = [line for line in run.output.splitlines() if "pyinfra error" in line or "error:" in line.lower()]
    assert len(errors) == 1 and words in errors[0], run.output[-2000:]
    untouched = lab.client.exec(name, ["sh", "-c", f"! id {USER} && ! test -e /etc/xrdp && "
                                                   "! test -e /etc/labwright/desktop.json"])
    assert untouched.exit_code == 0, "the refused deploy changed the guest"


@pytest.fixture(scope="module")
def plain(lab: Lab):
    """One plain lab container for all the refusals (each test leaves it as it found it; privileged goes last)."""
    name = f"lwdesk-bad-{secrets.token_hex(3)}"
    try:
        yield make_guest(lab, name, TEMPLATE)
    finally:
        lab.remove(name)


def test_bad_input_empty_password(lab, plain):
    run = deploy(plain, password="")
    assert_refused_untouched(lab, plain, run, f"${PASSWORD_ENV} is set but empty")


def test_bad_input_ubuntu_release_without_mozilla_repo_standin_os_release(lab, plain):
    # No Ubuntu image here: the guest's /etc/os-release says Ubuntu 20.04 (a stand-in for a focal container).
    sh(lab, plain, "cp -P /etc/os-release /root/os-release.saved && rm -f /etc/os-release && "
       "printf 'ID=ubuntu\\nVERSION_ID=\"20.04\"\\nVERSION_CODENAME=focal\\n' > /etc/os-release")
    try:
        run = run_pyinfra(f"@lxd/{plain}", "deploys/desktop.py", cwd=REPO, timeout=300)
    finally:
        sh(lab, plain, "rm -f /etc/os-release && mv /root/os-release.saved /etc/os-release")
    assert_refused_untouched(lab, plain, run, "Ubuntu 20.04 (focal) is not supported by Mozilla's apt")


def test_bad_input_port_3389_in_use(lab, plain):
    sh(lab, plain, "systemd-run --unit lw-squatter --collect python3 -m http.server 3389")
    try:
        wait_for(lab, plain, "ss -Hltn 'sport = :3389' | grep -q LISTEN")
        run = deploy(plain)
    finally:
        lab.client.exec(plain, ["systemctl", "stop", "lw-squatter"])
    assert_refused_untouched(lab, plain, run, "desktop_port: 3389 is already in use")
    assert "python3" in run.output


def test_bad_input_guest_data_privileged_or_deconfined(lab, plain, tmp_path):
    # The inventory's guest data goes through the guest model: refused before the deploy looks at the guest.
    for guest, words in (('{"backend": "lxd", "unprivileged": False}', "a desktop guest must be unprivileged"),
                         ('{"backend": "lxd", "lxd_config": {"raw.apparmor": "unconfined"}}',
                          "lxd_config raw.apparmor loosens")):
        inventory = tmp_path / "desk.py"
        inventory.write_text(f'desktops = [("@lxd/{plain}", {{"guest": {guest}}})]\n')
        run = run_pyinfra(str(inventory), "deploys/desktop.py", ESR, cwd=REPO, timeout=300)
        assert_refused_untouched(lab, plain, run, words)


def test_dry_run_plans_the_mozilla_repository_and_changes_nothing(lab, plain):
    # --dry only plans: nothing is fetched from packages.mozilla.org (unreachable here) and the guest is untouched.
    env = {k: v for k, v in tool_env().items() if k != PASSWORD_ENV}
    proc = subprocess.run([str(Path(sys.executable).parent / "pyinfra"), "--dry", f"@lxd/{plain}",
                           "deploys/desktop.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    for step in ("Mozilla's apt signing key", "Mozilla apt source (signed-by)", "Pin Mozilla's packages at 1000",
                 "Refresh apt lists (Mozilla repository added)", "desktop packages (no recommends)",
                 "xrdp.ini: port=3389, TLS only", "Firefox launcher on the desktop"):
        assert step in out, f"{step!r} not planned:\n{out[-3000:]}"
    assert "would get a generated password in /root/labwright-desktop-password-desk" in out
    assert ": generated password" not in out
    assert_refused_untouched(lab, plain, DeployRun(1, "pyinfra error: dry run\n", 0), "dry run")
    assert lab.client.exec(plain, ["test", "-e", "/etc/apt/sources.list.d/mozilla.list"]).exit_code == 1


def test_bad_input_privileged_guest(lab, plain):
    lab.client.set_state(plain, "stop", force=True)
    lab.client.request("PATCH", f"/1.0/instances/{plain}", {"config": {"security.privileged": "true"}})
    lab.client.set_state(plain, "start")
    wait_ready(lab.client, plain)
    run = deploy(plain)
    assert_refused_untouched(lab, plain, run, "is a privileged container")


def test_desktop_check_bad_guest_is_one_line_exit_2(lab):
    for guest, words in (("lw-no-such-desk", "no such LXD instance"), ("bad_name", "not an LXD instance name"),
                         ("lwtest-template", "is Stopped; start it first")):
        proc = subprocess.run([LABWRIGHT, "desktop", "check", guest], cwd=REPO, env=tool_env(), capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
