"""deploys/base.py for real, into fresh lab containers over @lxd, checked by the shipped testinfra suite.

The verify suite (labwright/verify/test_base.py) runs as users run it, in a subprocess with
``--hosts=lxc://NAME``; SSH logins are checked with paramiko against the container's address.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import paramiko
import pytest

from labwright.lab.lab import instance_address
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import Deployed, DeployRun, run_pyinfra
from support import apt_cache, guest_apt
from support.verify_run import run_verify

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
DROPIN = "/etc/ssh/sshd_config.d/00-labwright.conf"
APT_CACHE = "base-test"  # support.apt_cache: the base packages' .debs and lists between runs
# The target for a run that has nothing to do; override on a slow or busy machine.


def public_key_file(lab: Lab) -> str:
    return str(Path(lab.private_key_path).with_suffix(".pub"))


def deploy(lab: Lab, name: str, *data: str) -> DeployRun:
    """``pyinfra -y @lxd/NAME deploys/base.py`` with the lab key and extra ``--data key=value``."""
    return run_pyinfra(f"@lxd/{name}", "deploys/base.py", f"admin_ssh_public_key_file={public_key_file(lab)}",
                       *data, cwd=REPO)


def verify(lab: Lab, name: str, *options: str) -> subprocess.CompletedProcess[str]:
    """The shipped testinfra suite against the container, as a user would run it (support.verify_run)."""
    return run_verify("base", f"lxc://{name}", f"--base-admin-key-file={public_key_file(lab)}", *options)


def sh(lab: Lab, name: str, script: str) -> str:
    result = lab.client.exec(name, ["sh", "-c", script])
    assert result.exit_code == 0, f"{script!r} failed: {result.stderr.decode()}"
    return result.stdout.decode()


def ssh_connect(address: str, user: str, **auth) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect(address, username=user, timeout=10, banner_timeout=10, auth_timeout=10,
                   look_for_keys=False, allow_agent=False, **auth)
    return client


@pytest.fixture(scope="module")
def deployed(lab: Lab):
    """One fresh container, verified before and deployed once with the default data.

    Tests that change it put it back as they found it (the second-run test relies on that).
    """
    name = lab.fresh("lwbase")
    try:
        before = verify(lab, name)
        first = deploy(lab, name)
        assert first.rc == 0, first.output[-4000:]
        yield Deployed(name, instance_address(lab.client, name) or "", before, first)
    finally:
        lab.remove(name)


def assert_passes(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"verify suite failed:\n{result.stdout[-4000:]}{result.stderr[-2000:]}"


# --- the default deploy ----------------------------------------------------------------------------------
@pytest.mark.smoke  # a real pyinfra deploy and its testinfra suite: scripts/test --quick
def test_verify_fails_on_a_fresh_container_and_passes_after_the_deploy(lab, deployed):
    # The suite must be able to fail: the bare image has no admin user and password logins on.
    assert deployed.before.returncode == 1, deployed.before.stdout[-3000:]
    for check in ("test_admin_user_exists_in_group_sudo", "test_sshd_effective_setting",
                  "passwordauthentication", "test_locale_is_generated"):
        assert check in deployed.before.stdout
    assert deployed.first.totals.changed > 0 and deployed.first.totals.error == 0
    print(f"\nfirst deploy: {deployed.first.seconds:.1f}s, {deployed.first.totals.changed} changed")
    assert_passes(verify(lab, deployed.name))


def test_second_run_changes_nothing(lab, deployed):
    again = deploy(lab, deployed.name)
    assert again.rc == 0, again.output[-4000:]
    totals = again.totals
    assert (totals.changed, totals.error) == (0, 0), again.output[-4000:]
    assert "apt" not in again.output.lower(), "a no-change run must not touch apt"
    print(f"\nno-change re-run: {again.seconds:.2f}s ({totals.no_change} operations)")


def test_admin_logs_in_with_the_lab_key_and_has_passwordless_sudo(lab, deployed):
    client = ssh_connect(deployed.address, "labadmin", key_filename=lab.private_key_path)
    try:
        _, stdout, stderr = client.exec_command("sudo -n id -u")
        assert stdout.read().decode().strip() == "0", stderr.read().decode()
        assert stdout.channel.recv_exit_status() == 0
    finally:
        client.close()
    # PermitRootLogin no (the default): root's key, which the image authorizes, no longer gets in.
    assert sh(lab, deployed.name, "test -s /root/.ssh/authorized_keys && echo yes") == "yes\n"
    with pytest.raises(paramiko.AuthenticationException):
        ssh_connect(deployed.address, "root", key_filename=lab.private_key_path)


def test_password_logins_are_refused(lab, deployed):
    # Give both accounts a password first, so a refusal is the server's policy, not a missing password.
    sh(lab, deployed.name, "printf 'root:Lab-pw-1234\\nlabadmin:Lab-pw-1234\\n' | chpasswd")
    try:
        for user in ("root", "labadmin"):
            with pytest.raises(paramiko.AuthenticationException) as refused:
                ssh_connect(deployed.address, user, password="Lab-pw-1234")
            if isinstance(refused.value, paramiko.BadAuthenticationType):
                assert refused.value.allowed_types == ["publickey"]
    finally:
        sh(lab, deployed.name, "usermod -p '*' root && usermod -p '!' labadmin")


def test_unattended_upgrades_follow_the_host_data(lab, deployed):
    # On by default (the distribution's own default); off only when the host data says so, on purpose.
    assert sh(lab, deployed.name, "apt-config dump APT::Periodic::Unattended-Upgrade") == \
        'APT::Periodic::Unattended-Upgrade "1";\n'
    off = deploy(lab, deployed.name, "unattended_upgrades=false")
    assert off.rc == 0 and off.totals.changed >= 1, off.output[-4000:]
    assert "Unattended upgrades off" in off.output
    assert_passes(verify(lab, deployed.name, "--base-unattended-upgrades=off"))
    # The suite's default expects them on, and says so (its one check of it: the rest passed just above).
    stale = verify(lab, deployed.name, "-k", "test_unattended_upgrades_setting")
    assert stale.returncode == 1 and "test_unattended_upgrades_setting" in stale.stdout
    on = deploy(lab, deployed.name)
    assert on.rc == 0 and on.totals.changed >= 1, on.output[-4000:]
    assert "Unattended upgrades on" in on.output
    assert_passes(verify(lab, deployed.name, "--base-unattended-upgrades=on"))


def test_a_rejected_sshd_dropin_is_never_installed(lab, deployed):
    live_before = sh(lab, deployed.name, f"sha256sum {DROPIN}")
    bad = deploy(lab, deployed.name, 'sshd_extra_config=["MaxSessions lots"]')
    assert bad.rc != 0
    assert "candidate rejected" in bad.output and "MaxSessions" in bad.output, bad.output[-3000:]
    assert "Reload ssh" not in bad.output
    # The live drop-in is byte-for-byte the old one, nothing is left staged, sshd still takes its config.
    assert sh(lab, deployed.name, f"sha256sum {DROPIN}") == live_before
    assert sh(lab, deployed.name, "ls -A /etc/ssh/sshd_config.d") == "00-labwright.conf\n"
    sh(lab, deployed.name, "/usr/sbin/sshd -t && systemctl is-active ssh")
    assert_passes(verify(lab, deployed.name))

    # Control: the same path installs a valid extra line, and reloads sshd for it.
    good = deploy(lab, deployed.name, 'sshd_extra_config=["MaxSessions 4"]')
    assert good.rc == 0 and "Reload ssh" in good.output, good.output[-3000:]
    assert "maxsessions 4" in sh(lab, deployed.name, "sshd -T")
    restored = deploy(lab, deployed.name)
    assert restored.rc == 0 and restored.totals.changed >= 1
    assert sh(lab, deployed.name, f"sha256sum {DROPIN}") == live_before


def test_drift_is_caught_by_verify_and_repaired_by_the_deploy(lab, deployed):
    sh(lab, deployed.name, f"sed -i 's/^PasswordAuthentication no/PasswordAuthentication yes/' {DROPIN} "
                           "&& gpasswd -d labadmin sudo && echo Etc/Nowhere > /etc/timezone")
    drifted = verify(lab, deployed.name)
    assert drifted.returncode == 1
    for check in ("passwordauthentication", "test_admin_user_exists_in_group_sudo", "test_etc_timezone"):
        assert check in drifted.stdout, drifted.stdout[-3000:]
    repair = deploy(lab, deployed.name)
    assert repair.rc == 0 and repair.totals.changed >= 3, repair.output[-4000:]
    assert_passes(verify(lab, deployed.name))


def test_missing_key_file_is_a_one_line_error_before_any_change(lab, deployed, tmp_path):
    absent = tmp_path / "absent.pub"
    run = deploy(lab, deployed.name, f"admin_ssh_public_key_file={absent}")
    assert run.rc != 0
    lines = [line for line in run.output.splitlines() if "admin_ssh_public_key_file" in line]
    assert len(lines) == 1 and str(absent) in lines[0], run.output
    assert "Traceback" not in run.output
    assert "Beginning operation run" not in run.output


# --- other data, and an image that lacks packages -------------------------------------------------------
OTHER = {"admin_user": "ops", "timezone": "Europe/Berlin", "locale": "de_DE.UTF-8", "unattended_upgrades": "true"}
OTHER_VERIFY = ["--base-admin-user=ops", "--base-timezone=Europe/Berlin", "--base-locale=de_DE.UTF-8",
                "--base-unattended-upgrades=on"]


def apt_mirror_reachable(lab: Lab, name: str) -> bool:
    return guest_apt.mirror_reachable(lab.client, name)


def test_other_data_installs_missing_packages_deploys_verifies_then_changes_nothing(lab, lab_container):
    """A first deploy with other data on a fresh guest that lacks packages the deploy needs: they are installed (the
    deploy's apt work only happens when a package is missing), the suite passes with the other data and fails with
    its defaults, a second run changes nothing, and the other admin logs in. (Two tests before, each deploying and
    verifying a fresh container: the other data, then the same on one missing packages.) The .debs come from apt's
    lists and archives kept from an earlier run where there are (support.apt_cache), else from the mirror."""
    cached = apt_cache.restore(lab.client, lab_container, APT_CACHE)
    reachable = cached or apt_mirror_reachable(lab, lab_container)
    if reachable:  # offline, the other data is still checked; the install is not, and the test says so at the end
        sh(lab, lab_container, "export SUDO_FORCE_REMOVE=yes; "
           + guest_apt.command("purge -y -q sudo locales unattended-upgrades") + " >/dev/null")
    data = [f"{k}={v}" for k, v in OTHER.items()]
    first = deploy(lab, lab_container, *data)
    assert first.rc == 0, first.output[-4000:]
    assert ("Install missing base packages" in first.output) == reachable, first.output[-4000:]
    if reachable and not cached:
        apt_cache.save(lab.client, lab_container, APT_CACHE)
    assert_passes(verify(lab, lab_container, *OTHER_VERIFY))
    # The defaults no longer hold, and the suite says so.
    assert verify(lab, lab_container).returncode == 1
    again = deploy(lab, lab_container, *data)
    assert again.rc == 0 and again.totals.changed == 0, again.output[-4000:]
    address = instance_address(lab.client, lab_container) or ""
    ssh_connect(address, "ops", key_filename=lab.private_key_path).close()
    if not reachable:
        pytest.skip("the container cannot reach a Debian mirror: the other data checked, the missing packages' "
                    "install not")


def test_bad_data_is_refused_by_key_name(lab, deployed):
    for item, key in (("timezone=Mars/Olympus_Mons", "timezone"), ("locale=xx_XX.UTF-8", "locale"),
                      ("unattended_upgrades=sometimes", "unattended_upgrades"), ("admin_user=Bad.Name", "admin_user")):
        run = deploy(lab, deployed.name, item)
        assert run.rc != 0
        assert f"{key}: " in run.output and "Traceback" not in run.output, run.output[-2000:]
        assert "Beginning operation run" not in run.output



def test_sshd_config_without_the_include_is_refused(lab, deployed):
    # Without the Include the drop-in would be silently ignored; the deploy must say so and stop.
    include = "Include /etc/ssh/sshd_config.d/"
    sh(lab, deployed.name, f"sed -i 's|^{include}|#{include}|' /etc/ssh/sshd_config")
    try:
        run = deploy(lab, deployed.name)
        assert run.rc != 0 and "does not Include sshd_config.d" in run.output, run.output[-2000:]
        assert "Beginning operation run" not in run.output
    finally:
        sh(lab, deployed.name, f"sed -i 's|^#{include}|{include}|' /etc/ssh/sshd_config")
    assert deploy(lab, deployed.name).totals.changed == 0


# --- PermitRootLogin, as sshd really takes it -------------------------------------------------------------
def ssh_root_deploy(lab: Lab, deployed: Deployed, *data: str) -> DeployRun:
    """The deploy as a user bootstraps a host over SSH as root (docs/base.md), not through @lxd."""
    return run_pyinfra(deployed.address, "deploys/base.py", f"admin_ssh_public_key_file={public_key_file(lab)}",
                       "ssh_strict_host_key_checking=off", *data, cwd=REPO,
                       args=("--user", "root", "--key", lab.private_key_path))


def test_root_over_ssh_is_refused_unless_its_key_logins_are_kept_on_purpose(lab, deployed):
    # The image lets root in by key; restore that, as a host before its first base deploy.
    sh(lab, deployed.name, f"sed -i 's/^PermitRootLogin no$/PermitRootLogin prohibit-password/' {DROPIN} "
                           "&& systemctl reload ssh")
    try:
        refused = ssh_root_deploy(lab, deployed)
        assert refused.rc != 0
        lines = [line for line in refused.output.splitlines() if "sshd_permit_root_login: " in line]
        assert len(lines) == 1 and "reached over SSH as root" in lines[0], refused.output[-3000:]
        assert "--user labadmin --sudo" in lines[0] and "Beginning operation run" not in refused.output

        kept = ssh_root_deploy(lab, deployed, "sshd_permit_root_login=prohibit-password")
        assert kept.rc == 0, kept.output[-3000:]
        # Debian 12's OpenSSH 9.2 prints it under its old name (servconf.c's table had without-password first)
        assert re.search(r"^permitrootlogin (prohibit|without)-password$", sh(lab, deployed.name, "sshd -T"), re.M)
        ssh_connect(deployed.address, "root", key_filename=lab.private_key_path).close()
        assert_passes(verify(lab, deployed.name, "--base-permit-root-login=prohibit-password"))
        # The default expects no, and says so (its one check of it: the rest passed just above).
        default = verify(lab, deployed.name, "-k", "test_sshd_effective_permitrootlogin")
        assert default.returncode == 1 and "test_sshd_effective_permitrootlogin" in default.stdout, default.stdout
    finally:
        restored = deploy(lab, deployed.name)
        assert restored.rc == 0, restored.output[-3000:]
    assert "permitrootlogin no" in sh(lab, deployed.name, "sshd -T")
    with pytest.raises(paramiko.AuthenticationException):
        ssh_connect(deployed.address, "root", key_filename=lab.private_key_path)


def test_a_drop_in_read_first_is_named_and_the_old_one_gives_way(lab, deployed):
    conf_d = "/etc/ssh/sshd_config.d"
    # Where labwright put its drop-in before, and cloud-init's, which sorted before it and won.
    sh(lab, deployed.name, f"mv {DROPIN} {conf_d}/50-labwright.conf && "
                           f"printf 'PasswordAuthentication yes\\n' > {conf_d}/50-cloud-init.conf && "
                           "systemctl reload ssh && sshd -T | grep -qx 'passwordauthentication yes'")
    try:
        moved = deploy(lab, deployed.name)
        assert moved.rc == 0, moved.output[-3000:]
        assert "sshd -T: the hardening is in effect" in moved.output
        assert sh(lab, deployed.name, f"ls -A {conf_d}") == "00-labwright.conf\n50-cloud-init.conf\n"
        effective = sh(lab, deployed.name, "sshd -T")
        assert "passwordauthentication no" in effective and "permitrootlogin no" in effective
        assert_passes(verify(lab, deployed.name))

        # A file read before it (sshd keeps the first value): named in one line, by the effective check.
        sh(lab, deployed.name, f"printf 'PermitRootLogin yes\\n' > {conf_d}/00-aaa.conf && systemctl reload ssh")
        outvoted = deploy(lab, deployed.name)
        assert outvoted.rc != 0
        lines = [line for line in outvoted.output.splitlines() if "sshd -T says permitrootlogin yes, not no" in line]
        assert len(lines) == 1 and f"{conf_d}/00-aaa.conf sets it before {DROPIN}" in lines[0], outvoted.output[-3000:]
        assert "Beginning operation run" not in outvoted.output  # found before anything ran
        outvoted_verify = verify(lab, deployed.name, "-k", "test_sshd_effective_permitrootlogin")
        assert outvoted_verify.returncode == 1 and "test_sshd_effective_permitrootlogin" in outvoted_verify.stdout
    finally:
        sh(lab, deployed.name, f"rm -f {conf_d}/00-aaa.conf {conf_d}/50-cloud-init.conf && systemctl reload ssh")
    assert deploy(lab, deployed.name).rc == 0


# --- sudo ------------------------------------------------------------------------------------------------
def test_sudo_asks_for_the_password_only_when_the_data_says_so_and_one_exists(lab, deployed):
    sudoers = "/etc/sudoers.d/labwright-labadmin"
    # The admin has no password (useradd leaves it locked): asking sudo for one would lock everyone out.
    refused = deploy(lab, deployed.name, "admin_sudo_nopasswd=false")
    assert refused.rc != 0
    lines = [line for line in refused.output.splitlines() if "admin_sudo_nopasswd: " in line]
    assert len(lines) == 1 and "labadmin has no password" in lines[0] and "locked" in lines[0], refused.output[-3000:]
    assert "Beginning operation run" not in refused.output
    assert "NOPASSWD: ALL" in sh(lab, deployed.name, f"cat {sudoers}")
    sh(lab, deployed.name, "printf 'labadmin:Lab-pw-5678\\n' | chpasswd")
    try:
        asked = deploy(lab, deployed.name, "admin_sudo_nopasswd=false")
        assert asked.rc == 0, asked.output[-3000:]
        assert "NOPASSWD" not in sh(lab, deployed.name, f"cat {sudoers}")
        sh(lab, deployed.name, "visudo -c >/dev/null")
        no_prompt = lab.client.exec(deployed.name, ["runuser", "-u", "labadmin", "--", "sudo", "-n", "true"])
        assert no_prompt.exit_code != 0 and b"password is required" in no_prompt.stderr
        typed = "printf 'Lab-pw-5678\\n' | runuser -u labadmin -- sudo -S -k -p '' id -u"
        assert sh(lab, deployed.name, typed) == "0\n"
    finally:
        restored = deploy(lab, deployed.name)
        sh(lab, deployed.name, "usermod -p '!' labadmin")
    assert restored.rc == 0, restored.output[-3000:]
    assert sh(lab, deployed.name, "runuser -u labadmin -- sudo -n id -u") == "0\n"
    assert_passes(verify(lab, deployed.name))
