"""nvidia-smi's CSV query parsed, and the NvidiaGpus fact carrying the compute capability."""

from __future__ import annotations

import subprocess

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labwright.bench.memory import gpu_used_bytes
from labwright.facts.nvidia import NvidiaGpus
from labwright.gpu.arch import capabilities_of
from labwright.gpu.nvidia.smi import FIELDS, SMI_QUERY, gpus_of, parse_gpu_query, parse_query, query_command, smi_text
from support.fake_nvidia import QUERY_FIELDS, fake_nvidia_smi_script, nvidia_smi_double, nvidia_smi_query_lines

TWO = nvidia_smi_query_lines("570.133.07", (("NVIDIA GeForce RTX 5090", "12.0", 32607),
                                            ("NVIDIA GeForce RTX 3090", "8.6", 24576)))


def test_query_lines_parse_with_compute_capability():
    gpus = parse_gpu_query(TWO)
    assert [(g.index, g.name, g.compute_cap, g.driver_version, g.memory_mib) for g in gpus] == [
        (0, "NVIDIA GeForce RTX 5090", "12.0", "570.133.07", 32607),
        (1, "NVIDIA GeForce RTX 3090", "8.6", "570.133.07", 24576)]
    assert gpus[0].uuid.startswith("GPU-")


def test_error_lines_and_not_available_fields():
    text = ("Failed to initialize NVML: Driver/library version mismatch\n"
            "NVML library version: 550.54\n"
            "0, Tesla K80, GPU-1, [N/A], 470.256.02, [N/A]\n")
    gpus = parse_gpu_query(text)
    assert len(gpus) == 1 and gpus[0].compute_cap is None and gpus[0].memory_mib is None
    assert parse_gpu_query("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n") == []


def test_the_fact_asks_for_compute_cap_and_reads_a_fake_smi(tmp_path):
    fact = NvidiaGpus()
    command = fact.command()
    assert "compute_cap" in command and SMI_QUERY in command
    smi = tmp_path / "nvidia-smi"
    smi.write_text(fake_nvidia_smi_script(TWO))
    smi.chmod(0o755)
    out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True,
                         env={"PATH": f"{tmp_path}:/usr/bin:/bin"}).stdout
    facts = fact.process(out.splitlines())
    assert [(g["index"], g["compute_cap"]) for g in facts] == [(0, "12.0"), (1, "8.6")]
    # Without nvidia-smi on the PATH: no GPUs, no error.
    none = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True,
                          env={"PATH": "/nonexistent"}).stdout
    assert fact.process(none.splitlines()) == []


# --- an nvidia-smi without a field labwright asks for (the 470 branch has no compute_cap) -------------------------
def smi_on_path(tmp_path, version, gpus=(("NVIDIA GeForce RTX 3090", "8.6", 24268), ("Tesla T4", "7.5", 15109)),
                fields=None):
    """The nvidia-smi double of driver ``version`` in ``tmp_path``, which goes first on PATH."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(nvidia_smi_double(version, gpus, fields))
    smi.chmod(0o755)
    return {"PATH": f"{tmp_path}:/usr/bin:/bin"}


def test_a_470_driver_refuses_compute_cap_and_the_fact_asks_again_without_it(tmp_path):
    """470's nvidia-smi fails the whole query for compute_cap (exit 2; tests/conformance/nvidia-smi): the fact asked
    once would see no GPU. Asked again without the field, it lists them; the capability comes from the name."""
    env = smi_on_path(tmp_path, "470.256.02")
    bare = subprocess.run(["/bin/sh", "-c", f"nvidia-smi --query-gpu={','.join(FIELDS)} --format=csv,noheader"],
                          capture_output=True, text=True, env=env)
    assert (bare.returncode, bare.stdout) == (2, 'Field "compute_cap" is not a valid field to query.\n\n')
    fact = NvidiaGpus()
    out = subprocess.run(["/bin/sh", "-c", fact.command()], capture_output=True, text=True, check=True, env=env).stdout
    facts = fact.process(out.splitlines())
    assert [(g["name"], g["compute_cap"], g["compute_cap_from"], g["driver_version"], g["memory_mib"])
            for g in facts] == [("NVIDIA GeForce RTX 3090", "8.6", "name", "470.256.02", 24268),
                                ("Tesla T4", "7.5", "name", "470.256.02", 15109)]
    assert capabilities_of(facts) == ("7.5", "8.6")


def test_a_current_driver_is_asked_once(tmp_path):
    out = subprocess.run(["/bin/sh", "-c", query_command()], capture_output=True, text=True, check=True,
                         env=smi_on_path(tmp_path, "550.54.14")).stdout
    query = parse_query(out)
    assert query.rejected == () and query.fields == FIELDS and query.exit == 0
    assert [(g.compute_cap, g.compute_cap_from) for g in gpus_of(query)] == [("8.6", "nvidia-smi"),
                                                                             ("7.5", "nvidia-smi")]


_KNOWN = set(QUERY_FIELDS)
unknown_fields = st.lists(st.from_regex(r"\A[a-z][a-z0-9_]{0,10}(\.[a-z0-9_]{1,8})?\Z").filter(
    lambda f: f not in _KNOWN), min_size=1, max_size=3, unique=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(unknown=unknown_fields, where=st.lists(st.integers(0, len(FIELDS)), min_size=3, max_size=3),
       version=st.sampled_from(["470.256.02", "470.182.03", "550.54.14", "580.95.05"]))
def test_any_refused_field_is_dropped_and_the_rest_asked_again(tmp_path, unknown, where, version):
    """Whatever fields this nvidia-smi does not know, wherever they stand in the query: each is dropped in turn
    (nvidia-smi names only the first unknown field per run), and the GPUs come back with the fields it does know."""
    fields = list(FIELDS)
    for name, at in zip(unknown, where, strict=False):
        fields.insert(at, name)
    env = smi_on_path(tmp_path, version)
    out = subprocess.run(["/bin/sh", "-c", query_command(tuple(fields))], capture_output=True, text=True, check=True,
                         env=env).stdout
    query = parse_query(out)
    refused = [f for f in fields if f in unknown or (f == "compute_cap" and version.startswith("470."))]
    assert list(query.rejected) == refused
    assert query.fields == tuple(f for f in fields if f not in refused) and query.exit == 0
    gpus = gpus_of(query)
    assert [(g.index, g.name, g.compute_cap) for g in gpus] == [(0, "NVIDIA GeForce RTX 3090", "8.6"),
                                                                (1, "Tesla T4", "7.5")]
    assert {g.compute_cap_from for g in gpus} == {"name" if "compute_cap" in refused else "nvidia-smi"}


@given(name=st.text(st.characters(blacklist_characters='"\n\r', blacklist_categories=("Cs", "Cc", "Zl", "Zp")),
                    min_size=1, max_size=30))
def test_a_refusal_line_names_the_field_and_lists_no_gpu(name):
    text = f'Field "{name}" is not a valid field to query.\n'
    query = parse_query(text)
    assert query.rejected == (name,) and query.rows == [] and parse_gpu_query(text) == []


def test_every_field_refused_leaves_no_gpu_and_says_so(tmp_path):
    out = subprocess.run(["/bin/sh", "-c", query_command(("compute_cap",))], capture_output=True, text=True,
                         check=True, env=smi_on_path(tmp_path, "470.256.02")).stdout
    query = parse_query(out)
    assert query.rejected == ("compute_cap",) and query.fields == () and query.exit == 2 and query.rows == []
    assert smi_text(out) == 'Field "compute_cap" is not a valid field to query.'


def test_the_memory_sampler_asks_through_the_same_query(tmp_path):
    smi_on_path(tmp_path, "470.256.02")
    assert gpu_used_bytes(str(tmp_path / "nvidia-smi")) == 2 * 2**20  # 1 MiB on each GPU
    smi_on_path(tmp_path, "470.256.02", fields=("index", "name"))  # an nvidia-smi without memory.used
    assert gpu_used_bytes(str(tmp_path / "nvidia-smi")) is None
