"""labwright's reader of ``nvidia-smi --query-gpu`` against recorded outputs of the real tool
(tests/conformance/nvidia-smi/), and the double of tests/support/fake_nvidia against the same records.

nvidia-smi is closed source: each case names where the output was recorded (the public issue or review quoting it,
with the driver version) or the manual section it is rendered from. What labwright must make of it: the fields the
tool refused (a refused field fails the WHOLE query, exit 2), the GPUs listed, their compute capabilities. Where a
case gives ``double``, tests/support's nvidia-smi double of that driver version must print the same output and exit
status for the same command; ``asked_again``: labwright's query (labwright.gpu.nvidia.smi.query_command) run against the
double of that version must list the GPUs with those capabilities ("" unknown).
"""

from __future__ import annotations

import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from labwright.gpu.nvidia.smi import gpus_of, parse_query, query_command
from support.fake_nvidia import nvidia_smi_double

CASES_DIR = Path(__file__).resolve().parents[2] / "conformance" / "nvidia-smi"
CASES = sorted(CASES_DIR.glob("*.toml"))
KNOWN_EXPECTATIONS = {"rejected", "gpus", "compute_caps", "double", "asked_again", "note"}


def load(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        return tomllib.load(fh)


def asked_fields(command: str) -> tuple[str, ...]:
    for word in shlex.split(command):
        if word.startswith("--query-gpu="):
            return tuple(word.removeprefix("--query-gpu=").split(","))
    raise AssertionError(f"no --query-gpu in {command!r}")


def double(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / "nvidia-smi"
    path.write_text(nvidia_smi_double(spec["version"], tuple((n, c, int(m)) for n, c, m in spec["gpus"])))
    path.chmod(0o755)
    return path


def test_the_refusal_and_the_answer_after_it_are_recorded():
    names = {path.stem for path in CASES}
    assert {"query-compute-cap-470", "query-labwright-fields-470", "query-unknown-field",
            "query-without-compute-cap-470", "query-labwright-fields-580", "query-unknown-field-580",
            "query-two-unknown-fields-580"} <= names


@pytest.mark.parametrize("path", CASES, ids=lambda path: path.stem)
def test_case_names_its_source(path):
    case = load(path)
    sources = case["provenance"]["sources"]
    assert sources and case["provenance"]["how"], path
    for source in sources:
        assert source["project"] and source["version"] and source["file"] and source["lines"], source
    assert set(case["expect"]) <= KNOWN_EXPECTATIONS, set(case["expect"]) - KNOWN_EXPECTATIONS
    assert set(case["expect"]) - {"note"}, f"{path.name} checks nothing"


@pytest.mark.parametrize("path", CASES, ids=lambda path: path.stem)
def test_labwright_reads_the_recorded_output(path):
    case = load(path)
    run, expect = case["run"], case["expect"]
    query = parse_query(run["stdout"] + run["stderr"], asked_fields(run["command"]))
    if "rejected" in expect:
        assert list(query.rejected) == expect["rejected"]
    gpus = gpus_of(query)
    if "gpus" in expect:
        assert len(gpus) == expect["gpus"]
    if "compute_caps" in expect:
        assert [g.compute_cap or "" for g in gpus] == expect["compute_caps"]


@pytest.mark.parametrize("path", [p for p in CASES if "double" in load(p)["expect"]], ids=lambda path: path.stem)
def test_the_double_prints_what_was_recorded(path, tmp_path):
    case = load(path)
    run = case["run"]
    smi = double(tmp_path, case["expect"]["double"])
    argv = shlex.split(run["command"])
    done = subprocess.run([str(smi), *argv[1:]], capture_output=True, text=True, timeout=30)
    if case["provenance"]["how"].startswith("recorded on a real driver"):
        assert (done.returncode, done.stdout, done.stderr) == (run["exit"], run["stdout"], run["stderr"])
    else:
        # A public quote drops the empty line nvidia-smi prints after its refusal (recorded on 580.159.04:
        # query-unknown-field-580.toml): trailing empty lines are not compared for quoted cases.
        def trimmed(text: str) -> str:
            return text.rstrip("\n") + "\n" if text else text

        assert (done.returncode, trimmed(done.stdout), trimmed(done.stderr)) == \
            (run["exit"], trimmed(run["stdout"]), trimmed(run["stderr"]))


@pytest.mark.parametrize("path", [p for p in CASES if "asked_again" in load(p)["expect"]], ids=lambda path: path.stem)
def test_labwrights_query_gets_the_gpus_from_that_driver(path, tmp_path):
    spec = load(path)["expect"]["asked_again"]
    smi = double(tmp_path, spec)
    out = subprocess.run(["/bin/sh", "-c", query_command(smi=str(smi))], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    query = parse_query(out)
    assert query.exit == 0 and query.rejected == tuple(load(path)["expect"]["rejected"])
    assert [g.compute_cap or "" for g in gpus_of(query)] == spec["compute_caps"]
