"""The matrix and the GPU's compute capability: a build whose CUDA has no kernels for the GPU is refused, naming
the stacks (and the same release's builds) that would run there; without a compute capability nothing changes.

The expectations below are written out from NVIDIA's documents, not read from labwright/data/gpu-arch.toml, so a
wrong row in the table fails here:
- CUDA Toolkit release notes (docs.nvidia.com/cuda/cuda-toolkit-release-notes) and the nvcc "GPU Feature List"
  (docs.nvidia.com/cuda/cuda-compiler-driver-nvcc/#gpu-feature-list): sm_80 from CUDA 11.0, sm_86 from 11.1,
  sm_87 from 11.4, sm_89 and sm_90 from 11.8; sm_100, sm_101 and sm_120 from 12.8; sm_103 and sm_121 from 12.9;
  sm_110 (Thor, sm_101 renamed) from 13.0;
- CUDA 13.0 release notes, "Deprecated and Dropped Features": offline compilation for Maxwell, Pascal and Volta
  (sm_5x, sm_6x, sm_70, sm_72) removed, so their last toolkit is 12.9; sm_101 renamed sm_110;
- the Blackwell Compatibility Guide (docs.nvidia.com/cuda/blackwell-compatibility-guide), "Building Applications
  Using CUDA Toolkit 12.7 or Earlier": no cubin or PTX for Blackwell can be built there.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from labwright.errors import BadInput
from labwright.gpu import arch
from labwright.matrix.load import load_matrix
from labwright.matrix.resolve import StackRequest, resolve_stack
from labwright.matrix.stacks import get_stack, request_for
from labwright.paths import packaged_matrix_dir
from support.cli_child import run_cli

#: capability -> (first CUDA with native kernels, last CUDA that still builds them or None), from the sources above.
NVIDIA = {
    "5.0": ("6.0", "12.9"), "5.2": ("6.5", "12.9"), "5.3": ("7.0", "12.9"),
    "6.0": ("8.0", "12.9"), "6.1": ("8.0", "12.9"), "6.2": ("8.0", "12.9"),
    "7.0": ("9.0", "12.9"), "7.2": ("10.0", "12.9"), "7.5": ("10.0", None),
    "8.0": ("11.0", None), "8.6": ("11.1", None), "8.7": ("11.4", None), "8.9": ("11.8", None), "9.0": ("11.8", None),
    "10.0": ("12.8", None), "10.1": ("12.8", "12.9"), "10.3": ("12.9", None), "11.0": ("13.0", None),
    "12.0": ("12.8", None), "12.1": ("12.9", None),
}

#: Real torch builds in the committed matrix, one per CUDA (torch alone: the extensions are not what is tested).
TORCH_BUILDS = [("2.6.0", "12.4"), ("2.8.0", "12.6"), ("2.8.0", "12.8"), ("2.8.0", "12.9"), ("2.9.0", "13.0"),
                ("2.12.0", "13.2")]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def runs(cuda: str, cap: str) -> bool:
    first, last = NVIDIA[cap]
    return _version(first) <= _version(cuda) and (last is None or _version(cuda) <= _version(last))


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(packaged_matrix_dir())


def test_every_architecture_in_the_table_is_written_out_here():
    assert set(arch.table()) == set(NVIDIA)
    for cap, (first, last) in NVIDIA.items():
        entry = arch.table()[cap]
        assert (entry.min_cuda, entry.max_cuda) == (first, last), cap


@pytest.mark.parametrize("cap", sorted(NVIDIA, key=_version))
@pytest.mark.parametrize(("torch", "cuda"), TORCH_BUILDS)
def test_a_torch_build_resolves_only_where_its_cuda_has_kernels(matrix, cap, torch, cuda):
    resolution = resolve_stack(StackRequest(torch=torch, cuda=cuda, only=("torch",), compute_caps=(cap,)), matrix)
    sm = arch.architecture(cap).sm
    if runs(cuda, cap):
        assert resolution.ok, resolution.errors
        assert resolution.wheels[0].reason.endswith(f"; CUDA {cuda} has kernels for {sm}")
        return
    assert not resolution.ok and resolution.wheels == []
    [error] = resolution.errors
    assert error.startswith(f"torch {torch}+cu{cuda.replace('.', '')} (CUDA {cuda}) cannot run on this GPU: ")
    assert sm in error and "\n" not in error
    first, last = NVIDIA[cap]
    if _version(cuda) < _version(first):
        assert f"needs CUDA >= {first} builds" in error
    else:
        assert f"CUDA {cuda} dropped" in error and f"builds for it stop at CUDA {last}" in error
    # the named stacks are exactly the committed ones whose CUDA runs there, of the request's engine (tabbyAPI)
    usable = [name for name, stack in matrix.stacks.items() if runs(stack.cuda, cap) and stack.engine != "vllm"]
    if usable:
        listed = ", ".join(usable[:-1]) + " or " + usable[-1] if len(usable) > 1 else usable[0]
        assert f"; use {listed} instead" in error
    else:
        assert "none of the known stacks is one" in error
    # and the same torch release's builds that would run there
    others = sorted({w.cuda for w in matrix.wheels_of("torch")
                     if w.public_version == torch and w.cuda and runs(w.cuda, cap)}, key=_version)
    if others:
        assert error.endswith(f"build (--cuda {others[-1]})")
        assert all(f"cu{c.replace('.', '')}" in error.rsplit("; or ", 1)[1] for c in others)


def test_without_a_compute_cap_nothing_changes(matrix):
    for stack in matrix.stacks.values():
        plain = resolve_stack(request_for(stack), matrix).to_json()
        assert "compute_caps" not in plain
        # a GPU every stack has kernels for: the same wheels, only the reasons say so
        on_ada = resolve_stack(request_for(stack, compute_caps=("8.9",)), matrix).to_json()
        assert on_ada.pop("compute_caps") == ["8.9"]
        assert [w["url"] for w in on_ada["wheels"]] == [w["url"] for w in plain["wheels"]]
        assert on_ada["ok"] == plain["ok"] and on_ada["errors"] == plain["errors"]


def test_no_cuda_given_picks_the_newest_build_with_kernels(matrix):
    """As uv's --torch-backend=auto picks the highest CUDA the driver runs, but a CUDA 13 torch for a Pascal card
    (GTX 1080, P40: 6.1) is no pick: the newest CUDA 12 build is."""
    def torch_of(caps: tuple[str, ...]) -> str:
        resolution = resolve_stack(StackRequest(torch="2.11.0", only=("torch",), compute_caps=caps), matrix)
        assert resolution.ok, resolution.errors
        return resolution.wheels[0].wheel.version

    assert torch_of(()) == "2.11.0+cu130"
    assert torch_of(("6.1",)) == "2.11.0+cu128"
    assert torch_of(("12.0",)) == "2.11.0+cu130"
    assert torch_of(("6.1", "12.0")) == "2.11.0+cu128"  # a GTX 1080 beside an RTX 5090: both need kernels


def test_two_gpus_name_only_stacks_that_run_on_both(matrix):
    resolution = resolve_stack(request_for(get_stack("C", matrix), compute_caps=("7.0", "12.0")), matrix)
    [error] = resolution.errors
    assert "CUDA 13.0 dropped Volta (sm_70)" in error
    assert "use A, B or tabbyapi-cu12 instead" in error  # the cu128 stacks run on both; the cu130 ones not on sm_70


def test_the_stacks_named_instead_serve_the_same_engine(matrix):
    """A tabbyAPI stack refused on a GPU names tabbyAPI/exllamav3 stacks only, never vLLM's, and the reverse."""
    tabby = resolve_stack(request_for(get_stack("tabbyapi-cu12", matrix), compute_caps=("12.0",)), matrix)
    assert tabby.ok or all("vllm" not in error for error in tabby.errors)
    [error] = resolve_stack(StackRequest(torch="2.9.0", cuda="12.6", compute_caps=("12.0",)), matrix).errors
    assert "latest-prebuilt instead" in error and "vllm" not in error
    [error] = resolve_stack(request_for(get_stack("vllm", matrix), compute_caps=("6.1",)), matrix).errors
    assert "none of the known stacks is one" in error and "tabbyapi" not in error


def test_an_extension_without_a_build_for_the_gpu_is_absent_and_a_needed_one_refuses_the_stack(matrix):
    """Torch cu128 runs on an RTX 5090; a flash-attn made with CUDA 12.6 has no sm_120 kernels. exllamav3 0.0.37
    imports flash_attn, so the stack is refused naming flash-attn and why."""
    old_flash = [dataclasses.replace(w, cuda="12.6") if w.package == "flash-attn" and w.torch == "2.9" else w
                 for w in matrix.wheels]
    patched = dataclasses.replace(matrix, wheels=old_flash)
    request = StackRequest(torch="2.9.0", cuda="12.8", pins=("exllamav3==0.0.37",), compute_caps=("12.0",))
    resolution = resolve_stack(request, patched)
    [absent] = [a for a in resolution.absent if a.component == "flash_attn"]
    assert absent.reason.startswith("flash-attn 2.8.3+") and "torch2.9 (CUDA 12.6) cannot run on this GPU: " \
        in absent.reason and "sm_120" in absent.reason
    assert not resolution.ok and any(e.startswith("flash-attn: flash-attn 2.8.3") for e in resolution.errors)
    assert resolve_stack(dataclasses.replace(request, compute_caps=()), patched).ok  # without the GPU: as before
    assert resolve_stack(request, matrix).ok  # the real cu128 flash-attn has the kernels


@pytest.mark.parametrize("text", ["9.9x", "0", "", "sm_", "9.9", "a $(id)"])
def test_bad_compute_cap_is_bad_input(matrix, text):
    with pytest.raises(BadInput) as info:
        resolve_stack(StackRequest(torch="2.11.0", compute_caps=(text,)), matrix)
    assert "compute capability" in str(info.value) and "\n" not in str(info.value)


def test_capabilities_of_the_gpu_facts():
    gpus = [{"name": "NVIDIA GeForce RTX 5090", "compute_cap": "12.0"}, {"name": "old", "compute_cap": None},
            {"name": "NVIDIA GeForce RTX 3090", "compute_cap": "8.6"}, {"name": "b", "compute_cap": "12.0"}]
    assert arch.capabilities_of(gpus) == ("8.6", "12.0")
    assert arch.capabilities_of([]) == ()
    assert arch.capabilities_of(None) == ()  # pyinfra's answer on a host without nvidia-smi


# -- the command line ----------------------------------------------------------------------------------------------

def run(cli_env, *args):
    return run_cli(["matrix", "resolve", *args], env=cli_env)


def test_cli_refuses_a_blackwell_stack_without_kernels(cli_env):
    proc = run(cli_env, "--torch", "2.9.0", "--cuda", "12.6", "--compute-cap", "12.0")
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
        "labwright: error: stack refused: torch 2.9.0+cu126 (CUDA 12.6) cannot run on this GPU: Blackwell")
    assert "needs CUDA >= 12.8 builds" in proc.stderr and "use A, B, C, D" in proc.stderr
    assert "torch 2.9.0's own cu128 or cu130 build (--cuda 13.0)" in proc.stderr


def test_cli_json_refusal_is_the_resolution_and_the_error_object(cli_env):
    proc = run(cli_env, "--stack", "C", "--compute-cap", "sm_61", "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert list(data) == ["ok", "wheels", "absent", "errors", "compute_caps", "error", "exit_code"]
    assert data["ok"] is False and data["compute_caps"] == ["6.1"] and data["exit_code"] == 1
    assert data["errors"][0].startswith("torch 2.11.0+cu130 (CUDA 13.0) cannot run on this GPU: CUDA 13.0 dropped "
                                        "Pascal (sm_61)")
    assert data["error"] == "stack refused: " + data["errors"][0]
    assert proc.stderr == f"labwright: error: {data['error']}\n"


def test_cli_without_the_option_is_unchanged_and_with_a_fitting_gpu_resolves(cli_env):
    plain = run(cli_env, "--stack", "C", "--json")
    fitting = run(cli_env, "--stack", "C", "--compute-cap", "12.0", "--json")
    assert plain.returncode == fitting.returncode == 0, (plain.stderr, fitting.stderr)
    assert list(json.loads(plain.stdout)) == ["ok", "wheels", "absent", "errors"]
    assert [w["url"] for w in json.loads(fitting.stdout)["wheels"]] == \
        [w["url"] for w in json.loads(plain.stdout)["wheels"]]


@pytest.mark.parametrize("text", ["9.9x", "0"])
@pytest.mark.parametrize("as_json", [False, True])
def test_cli_bad_compute_cap_is_one_line_exit_2(cli_env, text, as_json):
    proc = run(cli_env, "--torch", "2.11.0", "--compute-cap", text, *(["--json"] if as_json else []))
    assert proc.returncode == 2
    line = f"--compute-cap: compute capability {text!r}: not MAJOR.MINOR; give it as nvidia-smi"
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"labwright: error: {line}")
    assert "Traceback" not in proc.stderr
    if as_json:
        assert json.loads(proc.stdout) == {"error": proc.stderr.removeprefix("labwright: error: ").rstrip("\n"),
                                           "exit_code": 2}
    else:
        assert proc.stdout == ""
