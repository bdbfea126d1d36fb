"""labwright.monitoring.config: scrape targets from inventory data, Prometheus's config and rules (checked by the real
promtool where Debian's prometheus package is installed), and the GPU textfile script run against a stand-in
nvidia-smi and a stand-in sysfs-free host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from labwright.litellm.config import EngineHost
from labwright.monitoring.config import (
    TEMPLATES,
    MonitoringError,
    Target,
    engine_targets,
    extra_targets,
    gpu_config,
    key_copy_script,
    litellm_targets,
    load_defaults,
    render_prometheus,
    render_rules,
)

RULES = load_defaults()["targets"]


def address(host: EngineHost) -> str:
    return {"@lxd/gpu2": "10.99.0.7", "@lxd/gw": "10.99.0.8"}[host.name]


def hosts() -> list[EngineHost]:
    return [EngineHost("@lxd/mon", {"llamacpp_model": "/srv/m.gguf", "monitoring_listen": "127.0.0.1:9090"}, True),
            EngineHost("@lxd/gpu2", {"vllm_model": "Qwen/Qwen3-8B-AWQ", "vllm_port": 8010}, False),
            EngineHost("@lxd/gw", {"litellm_port": 4001, "llamacpp_model": "/srv/x.gguf", "llamacpp_metrics": "false"},
                       False)]


def test_engines_with_a_metrics_endpoint_are_targets_with_their_keys():
    found = engine_targets(hosts(), RULES, address)
    assert [(t.job, t.guest, t.url) for t in found] == [
        ("llamacpp", "@lxd/mon", "http://127.0.0.1:8001/metrics"),
        ("vllm", "@lxd/gpu2", "http://10.99.0.7:8010/metrics")]  # llamacpp_metrics=false: no endpoint, not scraped
    assert found[0].key is not None and found[0].key.path == "/etc/llama-server/api-key" and found[0].key.local
    assert found[1].key is None  # vLLM's --api-key guards /v1 only
    gateway = litellm_targets(hosts(), address)
    assert [(t.url, t.key.name if t.key else None) for t in gateway] == [
        ("http://10.99.0.8:4001/metrics/", "LITELLM_MASTER_KEY")]


def test_the_gateway_is_scraped_with_its_master_key_file(tmp_path):
    """monitoring_litellm=true: the gateway's /metrics/ (LiteLLM's prometheus callback, which deploys/litellm.py
    turns on behind the master key) as one job with the master key's copy as its credentials_file; promtool takes
    it."""
    gateway = litellm_targets(hosts(), address)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "engine_key_litellm_lxd_gw").write_text("sk-x")
    rules = tmp_path / "rules.yml"
    rules.write_text(render_rules(5))
    config = tmp_path / "prometheus.yml"
    config.write_text(render_prometheus(gateway, [], "15s", str(tmp_path / "keys"), str(rules)))
    job = yaml.safe_load(config.read_text())["scrape_configs"][0]
    assert job == {"job_name": "litellm-lxd-gw", "metrics_path": "/metrics/", "static_configs": [
        {"targets": ["10.99.0.8:4001"], "labels": {"guest": "@lxd/gw", "service": "litellm"}}],
        "authorization": {"type": "Bearer", "credentials_file": str(tmp_path / "keys" / "engine_key_litellm_lxd_gw")}}
    assert gateway[0].key is not None and (gateway[0].key.path, gateway[0].key.name) == (
        "/etc/litellm/master.env", "LITELLM_MASTER_KEY")
    checked = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(("data", "words"), [
    ({"litellm_metrics": "false"}, "the gateway on @lxd/gw runs with litellm_metrics=false (no /metrics); deploy it "
     "again with litellm_metrics=true, or set monitoring_litellm=false"),
    ({"litellm_version": "1.79.3"}, "the gateway on @lxd/gw runs LiteLLM 1.79.3, whose prometheus callback is an "
     "enterprise feature"),
])
def test_a_gateway_without_open_metrics_is_refused_in_one_line(data, words):
    with pytest.raises(MonitoringError, match="^monitoring_litellm: ") as caught:
        litellm_targets([EngineHost("@lxd/gw", {"litellm_port": 4001, **data})], address)
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("value", "words"), [
    ("http://10.0.0.1:9400", "is not HOST:PORT or HOST:PORT/PATH"),
    ("10.0.0.1:99999", "is not a port number"),
    ("10.0.0.1:9400/metrics\n", "is not HOST:PORT"),
    ({"a": 1}, "must be a list"),
])
def test_a_bad_extra_target_is_one_line(value, words):
    with pytest.raises(MonitoringError, match="^monitoring_targets: ") as caught:
        extra_targets(value, "@lxd/mon")
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_extra_targets_list_or_comma_string():
    assert [t.url for t in extra_targets("10.0.0.5:9400, gpu1:9835/x", "h")] == [
        "http://10.0.0.5:9400/metrics", "http://gpu1:9835/x"]


def rendered(tmp_path: Path) -> tuple[Path, Path]:
    targets = [*engine_targets(hosts(), RULES, address), *extra_targets("10.0.0.5:9400", "h")]
    nodes = [Target("node", "@lxd/mon", "127.0.0.1", 9100), Target("node", "@lxd/gpu2", "10.99.0.7", 9100)]
    rules = tmp_path / "rules.yml"
    rules.write_text(render_rules(5))
    (tmp_path / "keys").mkdir()
    for target in targets:
        if target.key:
            (tmp_path / "keys" / target.key_name).write_text("lw-x")
    config = tmp_path / "prometheus.yml"
    config.write_text(render_prometheus(targets, nodes, "15s", str(tmp_path / "keys"), str(rules)))
    return config, rules


def test_the_config_scrapes_with_the_key_file_and_labels_the_guest(tmp_path):
    config, _ = rendered(tmp_path)
    doc = yaml.safe_load(config.read_text())
    jobs = {job["job_name"]: job for job in doc["scrape_configs"]}
    assert set(jobs) == {"llamacpp-lxd-mon", "vllm-lxd-gpu2", "extra-10.0.0.5-9400", "node"}
    llama = jobs["llamacpp-lxd-mon"]
    assert llama["authorization"] == {"type": "Bearer", "credentials_file": str(
        tmp_path / "keys" / "engine_key_llamacpp_lxd_mon")}
    assert llama["static_configs"][0]["labels"] == {"guest": "@lxd/mon", "service": "llama-server"}
    assert "authorization" not in jobs["vllm-lxd-gpu2"]
    assert [c["labels"]["guest"] for c in jobs["node"]["static_configs"]] == ["@lxd/mon", "@lxd/gpu2"]


def test_promtool_accepts_the_rendered_config_and_rules(tmp_path):
    config, rules = rendered(tmp_path)
    checked = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert checked.returncode == 0 and "SUCCESS: 12 rules found" in checked.stdout, checked.stdout + checked.stderr
    checked = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_rules_cover_left_vram_split_and_decode_by_context(tmp_path):
    _, rules = rendered(tmp_path)
    doc = yaml.safe_load(rules.read_text())
    rules_by_name: dict[str, list[dict]] = {}
    for group in doc["groups"]:
        for rule in group["rules"]:
            rules_by_name.setdefault(rule.get("record") or rule["alert"], []).append(rule)
    assert {"ModelLeftVram", "ModelSplitToCpu", "DecodeSlow", "labwright:decode_tokens_per_second",
            "labwright:decode_tokens_per_second:by_context"} <= set(rules_by_name)
    contexts = [r["labels"]["context"] for r in rules_by_name["labwright:decode_tokens_per_second:by_context"]]
    assert contexts == ["0-8K", "8K-32K", "32K-64K", "64K-128K", "128K+"]
    assert "< 5" in rules_by_name["DecodeSlow"][0]["expr"]


def test_the_key_copy_script_never_prints_a_key(tmp_path):
    key_file = tmp_path / "api-key"
    key_file.write_text("lw-" + "k" * 43 + "\n")
    target = engine_targets([EngineHost("h", {"llamacpp_model": "m", "llamacpp_api_key_file": str(key_file)}, True)],
                            RULES, address)[0]
    assert target.key is not None
    out = tmp_path / "keys"
    out.mkdir()
    check = subprocess.run(["sh", "-c", key_copy_script([target.key], str(out), "root", check=True)],
                           capture_output=True, text=True)
    assert check.stdout.strip() == "stale" and "kkkk" not in check.stdout + check.stderr
    group = subprocess.run(["id", "-gn"], capture_output=True, text=True).stdout.strip()
    write = subprocess.run(["sh", "-c", key_copy_script([target.key], str(out), group)], capture_output=True, text=True)
    assert write.returncode == 0 and "kkkk" not in write.stdout + write.stderr, write.stderr
    assert (out / target.key_name).read_text() == "lw-" + "k" * 43
    assert (out / target.key_name).stat().st_mode & 0o777 == 0o640
    again = subprocess.run(["sh", "-c", key_copy_script([target.key], str(out), "root", check=True)],
                           capture_output=True, text=True)
    assert again.stdout.strip() == "current"


FAKE_SMI = """#!/bin/sh
# nvidia-smi's CSV for labwright's GPU fields (--format=csv,noheader,nounits): one line per GPU
echo '0, NVIDIA H100 80GB HBM3, 1024, 81559, 37, 41, 118.52'
echo '1, NVIDIA GeForce RTX 4090, 23000, 24564, 99, 70, [N/A]'
"""


def test_the_gpu_script_writes_nvidia_series_for_the_textfile_collector(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    config = tmp_path / "gpu-metrics.json"
    config.write_text(gpu_config([]))
    out = tmp_path / "labwright.prom"
    done = subprocess.run([sys.executable, str(TEMPLATES / "labwright-gpu-metrics.py"), str(config), str(out)],
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    assert 'labwright_gpu_count{vendor="nvidia"} 2' in lines
    base = 'gpu="0",vendor="nvidia",name="NVIDIA H100 80GB HBM3"'
    assert f"labwright_gpu_memory_total_bytes{{{base}}} {81559 * 1024 * 1024}" in lines
    assert f"labwright_gpu_utilization_ratio{{{base}}} 0.37" in lines
    assert f"labwright_gpu_power_watts{{{base}}} 118.52" in lines
    assert not any("power_watts" in line and 'gpu="1"' in line for line in lines)  # [N/A] is left out, not 0
    assert 'labwright_gpu_metrics_error{source="nvidia-smi"} 0' in lines
    assert not (tmp_path / "labwright.prom.new").exists()


def test_gpu_config_names_the_engines_on_the_host():
    target = engine_targets(hosts()[:1], RULES, address)
    assert json.loads(gpu_config(target)) == {"engines": [{
        "service": "llama-server", "kind": "llamacpp", "url": "http://127.0.0.1:8001",
        "key_file": "/etc/llama-server/api-key"}]}


def test_packages_from_data_text_are_a_list_of_names():
    from labwright.monitoring.config import package_list

    assert package_list("prometheus,prometheus-node-exporter", "k") == ["prometheus", "prometheus-node-exporter"]
    assert package_list(["caddy"], "k") == ["caddy"]
    with pytest.raises(MonitoringError, match=r"^monitoring_packages: 'prometheus;id' is not a Debian package name"):
        package_list("prometheus;id", "monitoring_packages")


# --- a llama-server router (llamacpp_models): one target per model ------------------------------------------------

def router_host() -> EngineHost:
    return EngineHost("@lxd/mon", {"llamacpp_models": ["/srv/models/tiny.gguf", {"path": "/srv/b.gguf", "name": "b"}],
                                   "monitoring_listen": "127.0.0.1:9090"}, True)


def test_a_router_is_one_target_per_model_asked_without_loading_it():
    """The pinned llama.cpp's router answers /metrics per model (?model=NAME) and loads it first unless
    autoload=false (labwright.monitoring.config.ROUTER_PARAMS names the source lines)."""
    found = engine_targets([router_host()], RULES, address)
    assert [(t.job, t.model, t.url) for t in found] == [
        ("llamacpp", "tiny", "http://127.0.0.1:8001/metrics?autoload=false&model=tiny"),
        ("llamacpp", "b", "http://127.0.0.1:8001/metrics?autoload=false&model=b")]
    assert all(t.key is not None and t.key.path == "/etc/llama-server/api-key" for t in found)


def test_a_routers_models_are_one_job_labelled_by_model(tmp_path):
    targets = engine_targets([router_host()], RULES, address)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / targets[0].key_name).write_text("lw-x")
    rules = tmp_path / "rules.yml"
    rules.write_text(render_rules(5))
    config = tmp_path / "prometheus.yml"
    config.write_text(render_prometheus(targets, [], "15s", str(tmp_path / "keys"), str(rules)))
    jobs = yaml.safe_load(config.read_text())["scrape_configs"]
    assert [job["job_name"] for job in jobs] == ["llamacpp-lxd-mon"]
    assert jobs[0]["params"] == {"autoload": ["false"]} and jobs[0]["metrics_path"] == "/metrics"
    assert [c["labels"] for c in jobs[0]["static_configs"]] == [
        {"guest": "@lxd/mon", "service": "llama-server", "model": n, "__param_model": n} for n in ("tiny", "b")]
    done = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(gpu_config(targets))["engines"] == [{
        "service": "llama-server", "kind": "llamacpp", "url": "http://127.0.0.1:8001",
        "key_file": "/etc/llama-server/api-key", "models": ["tiny", "b"]}]


FAKE_SYSTEMCTL = """#!/bin/sh
# systemctl show UNIT -p MainPID -p InvocationID: NAME=VALUE lines (the unit runs as PID {pid})
echo MainPID={pid}
echo InvocationID=0123456789abcdef0123456789abcdef
"""
FAKE_JOURNALCTL = """#!/bin/sh
# journalctl ... --show-cursor [--after-cursor=C]: one offload line on the first read, nothing after it
echo "$@" >> {log}
case "$*" in *--after-cursor=c1*) echo '-- cursor: c2';; *) echo 'load_tensors: offloaded 7/9 layers to GPU'; \
echo '-- cursor: c1';; esac
"""


def test_the_gpu_script_lists_a_routers_models_and_asks_only_the_loaded_ones(tmp_path):
    """Against the router stand-in (tests/support/llama_router_standin.py, from the pinned server-models.cpp): each
    model's loaded gauge, the context of the loaded one's /slots, the unloaded one never asked (nothing loads); and
    the journal read from the last run's cursor the second time, the offload line remembered."""
    from support.llama_router_standin import router_standin

    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    log = tmp_path / "journalctl.log"
    for name, text in (("systemctl", FAKE_SYSTEMCTL.format(pid=os.getpid())),
                       ("journalctl", FAKE_JOURNALCTL.format(log=log)), ("nvidia-smi", FAKE_SMI)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "key").write_text("lw-router-key\n")
    script = tmp_path / "gpu-metrics.py"
    script.write_text((TEMPLATES / "labwright-gpu-metrics.py").read_text().replace(
        'STATE = "/run/labwright-gpu-metrics"', f'STATE = "{state}"'))
    models = {"tiny": "loaded", "b": "unloaded"}
    slots = {"tiny": [{"id": 0, "id_task": 5, "n_prompt_tokens": 300, "is_processing": False,
                       "next_token": [{"n_decoded": 12}]}]}
    with router_standin("lw-router-key", models, slots) as (url, asked):
        config = tmp_path / "gpu-metrics.json"
        config.write_text(json.dumps({"engines": [{"service": "llama-server", "kind": "llamacpp", "url": url,
                                                   "key_file": str(tmp_path / "key"), "models": ["tiny", "b"]}]}))
        out = tmp_path / "labwright.prom"
        for _ in range(2):
            done = subprocess.run([sys.executable, str(script), str(config), str(out)],
                                  env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    base = 'service="llama-server",engine="llamacpp"'
    assert f'labwright_engine_model_loaded{{{base},model="tiny"}} 1' in lines
    assert f'labwright_engine_model_loaded{{{base},model="b"}} 0' in lines
    assert f"labwright_engine_context_tokens{{{base}}} 312" in lines
    assert f"labwright_engine_layers_offloaded{{{base}}} 7" in lines  # remembered from the first run's read
    assert models == {"tiny": "loaded", "b": "unloaded"}  # the scrape loaded nothing
    assert sorted(set(asked)) == ["/models", "/slots?autoload=false&model=tiny"], asked
    reads = log.read_text().splitlines()
    assert len(reads) == 2 and "--after-cursor" not in reads[0] and "--after-cursor=c1" in reads[1], reads
    # One model per start: once its offload line is found, later runs do not read the journal again.
    assert (bin_dir / "nvidia-smi").exists()
    config.write_text(json.dumps({"engines": [{"service": "llama-server", "kind": "llamacpp", "url": "",
                                               "key_file": ""}]}))
    log.unlink()
    shutil.rmtree(state)
    for _ in range(3):
        done = subprocess.run([sys.executable, str(script), str(config), str(out)],
                              env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert f"labwright_engine_layers_offloaded{{{base}}} 7" in out.read_text().splitlines()
    assert len(log.read_text().splitlines()) == 1


@pytest.mark.parametrize(("value", "args"), [
    (["cpu", "meminfo"], "--collector.disable-defaults --collector.cpu --collector.meminfo --collector.textfile"),
    ("cpu, textfile", "--collector.disable-defaults --collector.cpu --collector.textfile"),
    (["all"], ""),
])
def test_node_exporter_runs_the_named_collectors_and_always_the_textfile_one(value, args):
    from labwright.monitoring.config import node_collector_args

    assert node_collector_args(value) == args
    assert node_collector_args(load_defaults()["service"]["node_collectors"]).startswith(
        "--collector.disable-defaults --collector.cpu ")


@pytest.mark.parametrize("value", [[], "cpu;id", ["cpu", 3], {"cpu": 1}, "--collector.x"])
def test_a_bad_collector_list_is_one_line(value):
    from labwright.monitoring.config import node_collector_args

    with pytest.raises(MonitoringError, match="^monitoring_node_collectors: .* is not a list of node-exporter "
                                              "collector names") as caught:
        node_collector_args(value)
    assert "\n" not in str(caught.value)


def test_the_gpu_scripts_http_client_joins_a_chunked_body():
    """The script asks the engine with a plain HTTP/1.0 request (no urllib.request import: half its CPU per run);
    a chunked answer (RFC 9112 section 7.1) is joined."""
    import runpy

    script = runpy.run_path(str(TEMPLATES / "labwright-gpu-metrics.py"))
    assert script["dechunk"](b"4\r\nWiki\r\n5;x=1\r\npedia\r\n0\r\n\r\n") == b"Wikipedia"
    assert script["get_json"]("https://127.0.0.1:1/x", "") is None  # only plain http to this host's engine


def test_the_gpu_script_reads_a_units_processes_and_start_from_systemds_files(tmp_path):
    """Where systemd keeps them (the unit's cgroup.procs, /run/systemd/units/invocation:UNIT), the script starts no
    systemctl: the stand-in one here fails the test if it is run. On a host without a GPU (and the engine holding
    no GPU node) the journal is not read at all: no model can be split there; with one, it is asked for that
    invocation."""
    bin_dir, cgroup, units = tmp_path / "bin", tmp_path / "cgroup", tmp_path / "units"
    bin_dir.mkdir()
    units.mkdir()
    (units / "invocation:llama-server.service").symlink_to("feedfacefeedfacefeedfacefeedface")
    procs = cgroup / "unified" / "system.slice" / "llama-server.service" / "cgroup.procs"
    procs.parent.mkdir(parents=True)
    procs.write_text(f"{os.getpid()}\n")
    log = tmp_path / "journalctl.log"
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\necho systemctl >> {log}\nexit 1\n")
    (bin_dir / "journalctl").write_text(FAKE_JOURNALCTL.format(log=log))
    for name in ("systemctl", "journalctl"):
        (bin_dir / name).chmod(0o755)
    script = tmp_path / "gpu-metrics.py"
    script.write_text((TEMPLATES / "labwright-gpu-metrics.py").read_text()
                      .replace('STATE = "/run/labwright-gpu-metrics"', f'STATE = "{tmp_path / "state"}"')
                      .replace('UNITS = "/run/systemd/units"', f'UNITS = "{units}"')
                      .replace('"/sys/fs/cgroup/unified"', f'"{cgroup / "unified"}"'))
    config = tmp_path / "gpu-metrics.json"
    config.write_text(json.dumps({"engines": [{"service": "llama-server", "kind": "vllm", "url": "", "key_file": ""}]}))
    out = tmp_path / "labwright.prom"
    subprocess.run([sys.executable, str(script), str(config), str(out)], env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
                   check=True)
    assert 'labwright_engine_up{service="llama-server",engine="vllm"} 1' in out.read_text().splitlines()
    assert not log.exists()  # no GPU: neither systemctl nor the journal
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    done = subprocess.run([sys.executable, str(script), str(config), str(out)],
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    assert 'labwright_engine_up{service="llama-server",engine="vllm"} 1' in lines
    assert 'labwright_engine_layers_offloaded{service="llama-server",engine="vllm"} 7' in lines
    reads = log.read_text().splitlines()
    assert len(reads) == 1 and "_SYSTEMD_INVOCATION_ID=feedfacefeedfacefeedfacefeedface" in reads[0], reads
    procs.write_text("")  # the unit's cgroup without a process: down
    subprocess.run([sys.executable, str(script), str(config), str(out)], env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
                   check=True)
    assert 'labwright_engine_up{service="llama-server",engine="vllm"} 0' in out.read_text().splitlines()
    assert "systemctl" not in log.read_text()


@pytest.mark.parametrize("value", ["[::1:9090", "::1:9090", "0.0.0.0:0", "localhost", "[]:9090", "127.0.0.1:99999",
                                   "a]:1", "999.1.1.1:9090"])
def test_a_listen_address_is_refused_naming_the_key_once(value):
    """Sweep at 2b91fd1: '[::1:9090' was accepted ('[]' stripped); the message named monitoring_monitoring_listen."""
    from pyinfra.api.exceptions import DeployError

    from labwright.deploys.monitoring import _listen
    with pytest.raises(DeployError) as refused:
        _listen("listen", value)
    assert str(refused.value).startswith("monitoring_listen: ") and "monitoring_monitoring" not in str(refused.value)


@given(st.text(alphabet="0123456789.:[]abf", max_size=24))
def test_any_listen_text_is_an_address_and_port_or_one_refusal(value):
    from pyinfra.api.exceptions import DeployError

    from labwright.deploys.monitoring import _listen
    try:
        address, port = _listen("listen", value)
    except DeployError as refused:
        assert "\n" not in str(refused)
        return
    assert 1 <= port <= 65535 and (":" not in address or (address[0], address[-1]) == ("[", "]"))
