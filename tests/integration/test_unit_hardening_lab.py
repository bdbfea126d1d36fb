"""The unit hardening (issue 31, item 5) in a real unprivileged LXD container of the test lab.

1. What an unprivileged container does with each directive, measured: a transient service (``systemd-run``) checks
   the directive's effect without it and with it. Each one is *enforced* (the effect is there only with it),
   *ignored* (the service starts, the effect is not there) or *refused* (the service does not start, e.g.
   226/NAMESPACE). ``MEASURED`` is the table docs/security.md "Hardened units" prints; a kernel, LXD or systemd
   that behaves otherwise fails here, naming the directive.
2. Every unit labwright renders (the real templates, tests/unit/deploys/test_unit_hardening.py's renderers),
   installed as systemd reads it with its ExecStart swapped for a small HTTP probe: it starts, serves, writes
   its own directory and nothing else, and runs with no capabilities, no new privileges and a seccomp filter.

The engines themselves (llama-server, the tabbyAPI, Kokoro and LiteLLM deploys) start and serve under these units
in their own deploy tests (test_llamacpp_deploy.py, test_tabbyapi_deploy.py, test_kokoro_deploy.py,
test_litellm_deploy.py, test_openwebui_browser.py).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from labwright.testing.lab_fixture import Lab
from labwright.testing.waiting import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "deploys"))
import test_unit_hardening as rendered  # (the unit test's renderers: one list of units)

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab]

#: directive (systemd-run -p properties) -> (a shell check that holds when the directive took effect, the outcome
#: measured in an unprivileged LXD container: enforced, ignored or refused)
MEASURED: dict[str, tuple[str, str, str]] = {
    "ProtectSystem=strict": ("-p ProtectSystem=strict", "! touch /var/lib/probe-open/x", "enforced"),
    "ReadWritePaths=": ("-p ProtectSystem=strict -p ReadWritePaths=/var/lib/probe-rw",
                        "touch /var/lib/probe-rw/x && ! touch /var/lib/probe-open/x", "enforced"),
    "ProtectHome=read-only": ("-p ProtectHome=read-only", "! touch /home/probe/f", "enforced"),
    "PrivateTmp=": ("-p PrivateTmp=yes", "! test -e /tmp/probe-host-tmp", "enforced"),
    "PrivateDevices=": ("-p PrivateDevices=yes", "! test -e /dev/console", "enforced"),
    "DevicePolicy=closed, DeviceAllow=": ("-p DevicePolicy=closed", "! (exec 3</dev/fuse) 2>/dev/null", "ignored"),
    "ProtectKernelTunables=": ("-p ProtectKernelTunables=yes",
                               "awk '$5 == \"/proc/sys\" && $6 ~ /^ro/ {f=1} END {exit !f}' /proc/self/mountinfo",
                               "enforced"),
    "ProtectKernelModules=": ("-p ProtectKernelModules=yes", "! ls /usr/lib/modules/probe", "enforced"),
    "ProtectKernelLogs=": ("-p ProtectKernelLogs=yes", "grep -q ' /proc/kmsg ' /proc/self/mountinfo", "enforced"),
    "ProtectControlGroups=": ("-p ProtectControlGroups=yes",
                              "! awk '$5 ~ \"^/sys/fs/cgroup\" && $6 ~ /^rw/ {f=1} END {exit !f}' /proc/self/mountinfo",
                              "enforced"),
    "ProtectClock=": ("-p ProtectClock=yes", "test $(sed -n 's/^Seccomp_filters:\\t//p' /proc/self/status) -gt 1",
                      "enforced"),
    "ProtectHostname=": ("-p ProtectHostname=yes", "test $(readlink /proc/self/ns/uts) != $(readlink /proc/1/ns/uts)",
                         "enforced"),
    "ProtectProc=invisible": ("-p ProtectProc=invisible -p User=nobody", "! test -e /proc/1/environ", "enforced"),
    "ProcSubset=pid": ("-p ProcSubset=pid", "! test -e /proc/meminfo", "enforced"),
    # Its own user namespace maps single ids (root, the service's user) where the container maps a whole range.
    "PrivateUsers=": ("-p PrivateUsers=yes", "awk '$3 > 1 {f=1} END {exit f}' /proc/self/uid_map", "enforced"),
    "PrivateNetwork=": ("-p PrivateNetwork=yes", "test $(readlink /proc/self/ns/net) != $(readlink /proc/1/ns/net)",
                        "enforced"),
    "RestrictNamespaces=": ("-p RestrictNamespaces=yes", "! unshare -U true", "enforced"),
    "LockPersonality=": ("-p LockPersonality=yes", "! setarch linux32 true", "enforced"),
    "MemoryDenyWriteExecute=": ("-p MemoryDenyWriteExecute=yes",
                                "! python3 -c 'import mmap; mmap.mmap(-1, 4096, prot=mmap.PROT_WRITE|mmap.PROT_EXEC)'",
                                "enforced"),
    "RestrictRealtime=": ("-p RestrictRealtime=yes",
                          "test $(sed -n 's/^Seccomp_filters:\\t//p' /proc/self/status) -gt 1", "enforced"),
    "RestrictSUIDSGID=": ("-p RestrictSUIDSGID=yes", "f=$(mktemp); ! chmod u+s $f", "enforced"),
    "CapabilityBoundingSet=": ("-p CapabilityBoundingSet=", "grep -q '^CapBnd:.0000000000000000' /proc/self/status",
                               "enforced"),
    "NoNewPrivileges=": ("-p NoNewPrivileges=yes", "grep -q '^NoNewPrivs:.1' /proc/self/status", "enforced"),
    "RestrictAddressFamilies=": ("-p 'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK'",
                                 "! python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)'",
                                 "enforced"),
    # A call outside the set (swapoff, x86-64 number 168) kills the caller with SIGSYS (exit 128 + 31); labwright's
    # units add SystemCallErrorNumber=EPERM, so it fails with EPERM instead.
    "SystemCallFilter=@system-service": ("-p SystemCallFilter=@system-service",
                                         "python3 -c 'import ctypes; ctypes.CDLL(None).syscall(168, b\"/x\")'; "
                                         "test $? = 159", "enforced"),
    "SystemCallArchitectures=native": ("-p SystemCallArchitectures=native",
                                       "test $(sed -n 's/^Seccomp_filters:\\t//p' /proc/self/status) -gt 1",
                                       "enforced"),
    "UMask=0027": ("-p UMask=0027", "test $(umask) = 0027", "enforced"),
    "IPAddressDeny=any": ("-p IPAddressDeny=any",
                          "! python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(); "
                          "socket.create_connection(s.getsockname(), timeout=5)'",
                          "ignored"),
    "SocketBindDeny=any": ("-p SocketBindDeny=any",
                           "! python3 -c 'import socket; socket.socket().bind((\"127.0.0.1\", 45321))'", "ignored"),
}

CHECKS = "/usr/local/lib/hardening-checks"
PROBE_SERVER = r'''
import errno, http.server, json, os, socket, sys
port, home = int(sys.argv[1]), os.environ["HOME"]
def write(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        os.unlink(path)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
def family(number):
    try:
        socket.socket(number, socket.SOCK_RAW).close()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
report = {"home": write(home + "/probe"), "open": write("/var/lib/probe-open/probe"),
          "no_new_privs": status["NoNewPrivs"].strip(), "cap_bnd": status["CapBnd"].strip(),
          "seccomp": status["Seccomp"].strip(), "packet": family(socket.AF_PACKET),
          "netlink": family(socket.AF_NETLINK),
          "console": os.path.exists("/dev/console"), "home_dir": home}
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(report).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()
'''


def sh(lab: Lab, name: str, script: str) -> str:
    result = lab.client.exec(name, ["sh", "-c", script])
    assert result.exit_code == 0, f"{script!r} failed ({result.exit_code}): {result.stderr.decode()[-2000:]}"
    return result.stdout.decode()


def measure_script() -> str:
    """One shell script for the container: each check written to a file (systemd would expand ``$`` in a command
    line), run as a transient service without the directive, then with it; one line ``directive|without|with|rc``."""
    lines = ["mkdir -p /home/probe /var/lib/probe-rw /var/lib/probe-open /usr/lib/modules/probe " + CHECKS,
             "chmod 1777 /var/lib/probe-open; touch /home/probe/f /tmp/probe-host-tmp"]
    run = "systemd-run --wait --quiet --collect --pipe --service-type=exec"
    for index, (directive, (props, check, _)) in enumerate(MEASURED.items()):
        body = f"if {check}; then echo effect; else echo none; fi\n"
        lines += [f"printf '%s' {shlex.quote(body)} > {CHECKS}/{index}.sh",
                  f"b=$({run} /bin/sh {CHECKS}/{index}.sh 2>/dev/null); "
                  f"w=$({run} {props} /bin/sh {CHECKS}/{index}.sh 2>/dev/null); rc=$?; "
                  f"printf '%s|%s|%s|%s\\n' {shlex.quote(directive)} \"$b\" \"$w\" \"$rc\""]
    return "\n".join(lines)


def test_what_an_unprivileged_container_does_with_each_directive(lab, lab_container):
    assert lab.client.instance(lab_container)["config"].get("security.privileged", "false") != "true"
    seen: dict[str, str] = {}
    for line in sh(lab, lab_container, measure_script()).splitlines():
        directive, baseline, with_it, rc = line.split("|")
        assert baseline == "none", f"{directive}: the check already holds without it; it measures nothing"
        seen[directive] = ("refused" if rc != "0" or not with_it else
                           "enforced" if with_it == "effect" else "ignored")
    expected = {directive: outcome for directive, (_, _, outcome) in MEASURED.items()}
    assert seen == expected, "\n".join(f"{d}: measured {seen.get(d)}, docs/security.md says {expected[d]}"
                                       for d in expected if seen.get(d) != expected[d])


def unit_for_probe(text: str, port: int) -> str:
    """The rendered unit as systemd reads it, its ExecStart the probe (the engine and its files are not here)."""
    kept = [line for line in text.splitlines()
            if not line.startswith(("ExecStart=", "EnvironmentFile=", "WorkingDirectory="))]
    at = kept.index("[Service]") + 1
    kept.insert(at, f"ExecStart=/usr/bin/python3 /usr/local/bin/hardening-probe.py {port}")
    return "\n".join(kept) + "\n"


def test_every_rendered_unit_starts_serves_and_is_confined(lab, lab_container, tmp_path):
    name = lab_container
    binary = tmp_path / "llama-server"
    binary.write_bytes(b"\x7fELF")
    units: dict[str, tuple[str, int, str]] = {}
    for index, key in enumerate(rendered.UNITS):
        unit_name, text = rendered.render(key, binary)
        unit_name = f"probe-{key}.service" if key.startswith("kokoro") else unit_name
        units[unit_name] = (text, 18100 + index, rendered.UNITS[key][1])
    users = {rendered.service_settings(text)["User"][0]: home for text, _, home in units.values()}
    script = ["mkdir -p /var/lib/probe-open && chmod 1777 /var/lib/probe-open",
              f"printf '%s' {shlex.quote(PROBE_SERVER)} > /usr/local/bin/hardening-probe.py"]
    script += [f"id -u {user} >/dev/null 2>&1 || useradd --system --shell /usr/sbin/nologin --home-dir {home} "
               f"--create-home {user}" for user, home in users.items()]
    for unit_name, (text, port, _) in units.items():
        script.append(f"printf '%s' {shlex.quote(unit_for_probe(text, port))} > /etc/systemd/system/{unit_name}")
    script += ["systemctl daemon-reload", f"systemctl start {' '.join(units)}"]
    sh(lab, name, "\n".join(script))

    for unit_name, (_, port, home) in units.items():
        fetch = (f"python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:{port}/\", "
                 f"timeout=5).read().decode())'")

        def served(fetch: str = fetch) -> str | None:
            result = lab.client.exec(name, ["sh", "-c", fetch])
            return result.stdout.decode() if result.exit_code == 0 else None

        report = json.loads(wait_for(f"{unit_name} to serve on :{port}", served, timeout=60))
        state = dict(line.split("=", 1) for line in
                     sh(lab, name, f"systemctl show -p ActiveState -p NRestarts {unit_name}").split())
        assert state == {"ActiveState": "active", "NRestarts": "0"}, f"{unit_name}: {state}"
        assert report["home_dir"] == home and report["home"] == "ok", f"{unit_name}: {report}"
        assert report["open"] == "EROFS", f"{unit_name}: a world-writable path outside it is writable: {report}"
        assert report["no_new_privs"] == "1" and report["cap_bnd"] == "0000000000000000", report
        assert report["seccomp"] == "2", f"{unit_name}: no seccomp filter: {report}"
        assert report["packet"] == "EAFNOSUPPORT" and report["netlink"] == "ok", report


def booted(lab: Lab, name: str) -> bool:
    result = lab.client.exec(name, ["systemctl", "is-system-running"])
    return result.stdout.decode().strip() in ("running", "degraded")


#: unit name -> its device settings (each unit: DevicePolicy=closed and ProtectClock, as labwright's GPU units)
DEVICE_UNITS = {
    "devprobe-closed": "",
    "devprobe-group": "DeviceAllow=char-misc rw\n",
    "devprobe-path": "DeviceAllow=/dev/fuse rw\n",
    "devprobe-dropin": "DeviceAllow=char-misc rw\n",  # plus docs/security.md's drop-in that turns the ACL off
}


def test_device_groups_in_a_privileged_container(lab, lab_container):
    """Where the device controller works (a privileged container), /dev/fuse (misc, 10:229) stands for a GPU node:
    a group entry (what labwright's GPU units use) against LXC's per-node list, a path entry, and the drop-in
    fallback docs/security.md gives for privileged containers on a cgroup v1 host."""
    name = lab_container
    lab.client.set_state(name, "stop", force=True)
    lab.client.request("PATCH", f"/1.0/instances/{name}", {"config": {"security.privileged": "true"}})
    lab.client.set_state(name, "start")
    wait_for(f"systemd in the privileged {name} to finish booting", lambda: booted(lab, name), timeout=120)
    cgroup_v1 = lab.client.exec(name, ["test", "-d", "/sys/fs/cgroup/devices"]).exit_code == 0
    script = ["mkdir -p /run/devprobe /etc/systemd/system/devprobe-dropin.service.d",
              "printf '%s\\n' '(exec 3</dev/fuse) 2>/dev/null && echo open > /run/devprobe/$1 || "
              "echo denied > /run/devprobe/$1' > /usr/local/lib/devprobe.sh",
              "printf '[Service]\\nDevicePolicy=auto\\nDeviceAllow=\\n' > "
              "/etc/systemd/system/devprobe-dropin.service.d/devices.conf"]
    for unit, allow in DEVICE_UNITS.items():
        text = (f"[Service]\nType=oneshot\nExecStart=/bin/sh /usr/local/lib/devprobe.sh %N\nPrivateDevices=false\n"
                f"ProtectClock=true\nDevicePolicy=closed\n{allow}")
        script.append(f"printf '%s' {shlex.quote(text)} > /etc/systemd/system/{unit}.service")
    script += ["systemctl daemon-reload", f"systemctl start {' '.join(DEVICE_UNITS)}",
               "for u in " + " ".join(DEVICE_UNITS) + "; do printf '%s=%s\\n' $u $(cat /run/devprobe/$u); done"]
    seen = dict(line.split("=") for line in sh(lab, name, "\n".join(script)).split())
    # cgroup v1: LXC allows c 10:229, so systemd's c 10:* for the group is refused and the node stays closed;
    # cgroup v2: systemd's BPF program allows the group and LXC's allows the node.
    group = "denied" if cgroup_v1 else "open"
    assert seen == {"devprobe-closed": "denied", "devprobe-group": group, "devprobe-path": "open",
                    "devprobe-dropin": "open"}, f"cgroup {'v1' if cgroup_v1 else 'v2'}: {seen}"
