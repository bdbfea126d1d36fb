"""nvidia-smi's CSV query parsed, and the NvidiaGpus fact carrying the compute capability."""

from __future__ import annotations

import subprocess

from labwright.facts.nvidia import NvidiaGpus
from labwright.gpu.smi import SMI_QUERY, parse_gpu_query
from support.fake_nvidia import fake_nvidia_smi_script, nvidia_smi_query_lines

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
