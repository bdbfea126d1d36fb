"""Checks that need no host run before any host is contacted: a bad value of any key of any service deploy is refused
while pyinfra prepares, before the deploy asks the host its first fact (pyinfra -vv says "Loaded fact" for each).

Sweep at 6d041d3: llamacpp_api_key_file and llamacpp_runtime_packages were checked after nvidia-smi ran on the host,
openwebui_admin_name and openwebui_backend after a file fact, Open WebUI's, Kokoro's and LiteLLM's runtime_packages
not at all (a string was taken letter by letter). The keys and the bad values are drawn anew on each run, from every
key the deploys' defaults.toml name: the cases are not a list someone fixed one by one."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[3]
#: what each deploy needs so that it reaches its own keys (an engine in the inventory for the gateways and the UI)
NEEDS = {"llamacpp": ["llamacpp_model=/srv/m.gguf"], "tabbyapi": ["tabbyapi_model_name=m"],
         "vllm": ["vllm_model=/srv/m"], "kokoro": ["kokoro_source={kokoro}"], "litellm": ["llamacpp_model=/srv/m.gguf"],
         "monitoring": [], "openwebui": ["llamacpp_model=/srv/m.gguf"],
         "gateway": ["gateway_names=llm.lab", "llamacpp_model=/srv/m.gguf"]}


def _leaves(table: dict, found: set[str]) -> set[str]:
    for key, value in table.items():
        if isinstance(value, dict):
            _leaves(value, found)
        else:
            found.add(key)
    return found


CASES = sorted((name, f"{name}_{key}") for name in NEEDS
               for key in _leaves(tomllib.loads((REPO / "templates" / name / "defaults.toml").read_text()), set()))
CONTROL = st.sampled_from([chr(c) for c in (*range(1, 9), *range(11, 32), *range(127, 160))])


@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(CASES), control=CONTROL, before=st.sampled_from(["", "x", "8001", "/opt/x", "a,b"]),
       after=st.sampled_from(["", "y", "1"]))
def test_a_bad_value_is_refused_naming_its_key_before_the_first_fact(case, control, before, after, tmp_path):
    name, key = case
    kokoro = tmp_path / "kokoro"
    (kokoro / "api").mkdir(parents=True, exist_ok=True)
    (kokoro / "pyproject.toml").touch()
    command = [str(Path(sys.executable).with_name("pyinfra")), "-vv", "--dry", "@local", str(REPO / "deploys" /
                                                                                          f"{name}.py")]
    for needed in NEEDS[name]:
        command += ["--data", needed.format(kokoro=kokoro)]
    command += ["--data", f"{key}={before}{control}{after}"]
    run = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    output = run.stdout + run.stderr
    assert run.returncode != 0, f"{key}={before!r}+{control!r}+{after!r} was accepted:\n{output[-2000:]}"
    prepared, _, refusal = output.partition("pyinfra error")
    assert "Loaded fact" not in prepared, f"{key}: a fact before the refusal:\n{output[-2000:]}"
    assert f"{key}: " in refusal.splitlines()[0] if refusal else False, output[-2000:]
    assert "Traceback" not in output
