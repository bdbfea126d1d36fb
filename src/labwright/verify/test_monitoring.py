"""testinfra checks of what deploys/monitoring.py promises, on the host that runs Prometheus.

    labwright verify monitoring --hosts=@lxd/lw-node1
    LABWRIGHT_MONITORING_LISTEN=127.0.0.1:9090 labwright verify monitoring --hosts=@ssh/root@ADDR

Expected values come from the environment, else templates/monitoring/defaults.toml: LABWRIGHT_MONITORING_LISTEN,
LABWRIGHT_MONITORING_TEXTFILE_DIR. The HTTP checks run on the host itself (python3), so they work with Prometheus on
loopback; every scrape target must be up, and promtool must accept the config and rules as they are on the host.
"""

from __future__ import annotations

import os
import tomllib

import pytest

from labwright import paths
from labwright.shell import quote
from labwright.textio import loads_json
from labwright.verify.service_checks import assert_runs_as, assert_unit_enabled_and_running

DEFAULTS = tomllib.loads((paths.templates_dir("monitoring") / "defaults.toml").read_text())["service"]


def setting(name: str) -> str:
    return os.environ.get(f"LABWRIGHT_MONITORING_{name.upper()}") or str(DEFAULTS[name])


LISTEN, TEXTFILE_DIR = setting("listen"), setting("textfile_dir")
ADDRESS, _, PORT = LISTEN.rpartition(":")
URL = f"http://{'127.0.0.1' if ADDRESS in ('0.0.0.0', '::', '[::]') else ADDRESS}:{PORT}"

GET_JSON = """
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=30) as answer:
    print(json.dumps(json.load(answer)))
"""


def api(host, path: str) -> dict:
    result = host.run(f"python3 -c {quote(GET_JSON)} {quote(URL + path)}")
    assert result.rc == 0, f"GET {path} on the host failed: {result.stderr.strip()[-500:]}"
    return loads_json(result.stdout)


@pytest.mark.parametrize("service", ["prometheus", "prometheus-node-exporter"])
def test_services_enabled_and_running(host, service):
    assert_unit_enabled_and_running(host, service)
    assert_runs_as(host, service, "prometheus")


def test_gpu_metrics_timer_runs(host):
    timer = host.service("labwright-gpu-metrics.timer")
    assert timer.is_enabled and timer.is_running, "labwright-gpu-metrics.timer is not enabled and running"
    prom = host.file(f"{TEXTFILE_DIR}/labwright.prom")
    assert prom.exists, f"{TEXTFILE_DIR}/labwright.prom is missing: the GPU script has not run"
    assert "labwright_gpu_count{" in prom.content_string


def test_promtool_accepts_config_and_rules(host):
    config = host.run("promtool check config /etc/prometheus/prometheus.yml")
    assert config.rc == 0, config.stdout + config.stderr
    rules = host.run("promtool check rules /etc/prometheus/labwright-rules.yml")
    assert rules.rc == 0, rules.stdout + rules.stderr


def test_prometheus_ready_on_its_address(host):
    assert host.socket(f"tcp://{ADDRESS.strip('[]')}:{PORT}").is_listening


def test_every_target_is_up(host):
    targets = api(host, "/api/v1/targets")["data"]["activeTargets"]
    assert targets, "Prometheus has no scrape targets"
    down = [f"{t['scrapePool']} {t['scrapeUrl']}: {t['health']} {t['lastError']}" for t in targets
            if t["health"] != "up"]
    assert not down, "; ".join(down)


def test_rules_loaded(host):
    groups = api(host, "/api/v1/rules")["data"]["groups"]
    names = {rule["name"] for group in groups for rule in group["rules"]}
    assert {"labwright:decode_tokens_per_second", "ModelLeftVram", "ModelSplitToCpu"} <= names, names


def test_scrape_keys_closed_to_others(host):
    key_dir = setting("key_dir")
    for line in host.run(f"stat -c '%a %U %G %n' {quote(key_dir)}/* 2>/dev/null").stdout.splitlines():
        mode, user, group, name = line.split(" ", 3)
        assert (mode, user, group) == ("640", "root", "prometheus"), f"{name}: {mode} {user}:{group}"
