"""The resolver against the committed matrix: the seed's table A-D, tabbyAPI's extras, and every refusal reason."""

from __future__ import annotations

import pytest

from labwright.errors import BadInput
from labwright.matrix.load import load_matrix
from labwright.matrix.resolve import StackRequest, resolve_stack
from labwright.matrix.stacks import short_label
from labwright.paths import packaged_matrix_dir

MATRIX_DIR = packaged_matrix_dir()
SEED_PINS = ("exllamav3==0.0.37", "flash-attn==2.8.3", "causal-conv1d==1.6.2.post1")


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(MATRIX_DIR)


def resolve(matrix, torch, cuda, python="3.12", **kw):
    return resolve_stack(StackRequest(torch=torch, cuda=cuda, python=python, **kw), matrix)


def labels(resolution) -> dict[str, str]:
    return {c: ", ".join(short_label(x.wheel) for x in resolution.chosen(c)) or "✗"
            for c in ("torch", "exllamav3", "flash_attn", "causal_conv1d", "fla")}


# The seed's table, cell by cell, as the resolver must produce it from the stack's torch + CUDA and the seed's pins.
# (D's ExLlamaV3 cell, 0.0.37+cu132, is a wheel built for torch 2.11.0: see test_seed_d_exllamav3_is_refused.)
SEED_ROWS = {
    "A": ("2.9.0", "12.8", {"torch": "2.9.0+cu128", "exllamav3": "0.0.37+cu128", "flash_attn": "2.8.3+cu128",
                            "causal_conv1d": "1.6.2.post1+cu12"}),
    "B": ("2.10.0", "12.8", {"torch": "2.10.0+cu128", "exllamav3": "0.0.37+cu128", "flash_attn": "2.8.3+cu128",
                             "causal_conv1d": "1.6.2.post1+cu12"}),
    "C": ("2.11.0", "13.0", {"torch": "2.11.0+cu130", "exllamav3": "0.0.37+cu132", "flash_attn": "2.8.3+cu130",
                             "causal_conv1d": "✗"}),
    "D": ("2.12.0", "13.0", {"torch": "2.12.0+cu130", "exllamav3": "✗", "flash_attn": "2.8.3+cu130",
                             "causal_conv1d": "✗"}),
}


@pytest.mark.parametrize("row", sorted(SEED_ROWS))
def test_seed_rows(matrix, row):
    torch, cuda, expected = SEED_ROWS[row]
    result = resolve(matrix, torch, cuda, pins=SEED_PINS)
    got = labels(result)
    assert {k: got[k] for k in expected} == expected
    assert got["fla"] == "0.6.0, 0.6.0"  # FLA ✓ in every row: flash-linear-attention + fla-core
    assert result.ok is (row != "D")


def test_seed_exact_wheels_for_stack_c(matrix):
    """Stack C revised: the wheel the seed says nobody reaches for, from mjun0812 v0.9.4, as tabbyAPI pinned it."""
    result = resolve(matrix, "2.11.0", "13.0", pins=SEED_PINS)
    flash = result.chosen("flash_attn")[0].wheel
    assert flash.url == ("https://github.com/mjun0812/flash-attention-prebuild-wheels/releases/download/v0.9.4/"
                         "flash_attn-2.8.3+cu130torch2.11-cp312-cp312-linux_x86_64.whl")
    exl = result.chosen("exllamav3")[0]
    assert exl.wheel.version == "0.0.37+cu132.torch2.11.0"
    assert "same major" in exl.reason and "pins torch==2.11.0" in exl.reason
    assert [(a.name, a.reason) for a in result.absent] == [(
        "causal-conv1d",
        "no wheel built for torch 2.11 (built for torch 2.6, 2.7, 2.8, 2.9, 2.10); "
        "exllamav3 falls back to Triton, measured cost ~0 on RTX 4070 per field note 001")]


def test_seed_a_uses_the_prebuilt_release_tabbyapi_pinned(matrix):
    result = resolve(matrix, "2.9.0", "12.8", pins=SEED_PINS)
    flash = result.chosen("flash_attn")[0]
    assert flash.wheel.release == "v0.9.0"  # the newest of its six releases (Download1)
    assert "cu126torch2.9" in [a.local for a in flash.alternatives]
    assert result.chosen("causal_conv1d")[0].wheel.sha256.startswith("3d09789a")


def test_seed_d_exllamav3_is_refused(matrix):
    result = resolve(matrix, "2.12.0", "13.0", pins=SEED_PINS)
    assert not result.ok
    assert result.errors == ["exllamav3: no wheel built for torch 2.12 (built for torch 2.7, 2.8, 2.9, 2.10, 2.11)"]
    assert [a.local for a in result.chosen("flash_attn")[0].alternatives] == ["cu132torch2.12"]  # "or +cu132 ✓"


def test_causal_conv1d_absence_matches_the_issue_wording(matrix):
    result = resolve(matrix, "2.11.0", "13.0")
    absent = {a.name: a.reason for a in result.absent}
    assert absent["causal-conv1d"] == ("no wheel built for torch 2.11 (prebuilt for torch 2.6 .. 2.10; nearest torch "
                                       "with one: 2.10, causal-conv1d 1.6.2.post1); exllamav3 falls back to Triton, "
                                       "measured cost ~0 on RTX 4070 per field note 001")


def test_newest_compatible_without_pins(matrix):
    result = resolve(matrix, "2.11.0", "13.0", driver="580.65")
    assert result.ok
    assert labels(result)["exllamav3"] == "1.4.2+cu132"
    torch_reason = result.chosen("torch")[0].reason
    assert "minor-version compatibility" in torch_reason and "580.65.06" in torch_reason


def test_tabbyapi_extras_resolve_to_the_urls_tabbyapi_pins(matrix):
    from urllib.parse import unquote

    for name in ("tabbyapi-cu12", "tabbyapi-cu13"):
        stack = matrix.stacks[name]
        result = resolve_stack(StackRequest(torch=stack.torch, cuda=stack.cuda, python=stack.python,
                                            pins=stack.pins, only=stack.only), matrix)
        assert result.ok, result.errors
        urls = {unquote(c.wheel.url) for c in result.wheels}
        assert {unquote(u) for u in stack.upstream_urls} <= urls
        assert not result.chosen("flash_attn") and not result.absent  # the extras install no flash-attn


@pytest.mark.parametrize(
    ("request_kw", "error"),
    [
        ({"torch": "2.12.0", "cuda": "12.8"},
         "torch 2.12.0 has no wheel for CUDA 12.8 (its indexes: cu126, cu130, cu132)"),
        ({"torch": "2.11.0", "cuda": "13.0", "driver": "570.86"},
         "driver 570.86 is too old for CUDA 13.0 (torch): it needs >= 580.65.06 "
         "(or >= 580 with minor-version compatibility)"),
        ({"torch": "2.9.0", "cuda": "12.8", "python": "3.9"},
         "torch 2.9.0+cu128 has no wheel for Python 3.9 (wheels: cp310, cp311, cp312, cp313, cp314)"),
        ({"torch": "2.11.0", "cuda": "13.0", "python": "3.11"},
         "exllamav3: no cp311 wheel built for torch 2.11 + CUDA 13 (only cp312, cp313, cp314)"),
        ({"torch": "2.5.1", "cuda": "12.4"}, "torch 2.5.1: no such torch wheel in the matrix"),
        ({"torch": "2.11.0", "cuda": "12.8", "driver": "520.61"},
         "driver 520.61 is too old for CUDA 12.8 (torch): it needs >= 570.26 (or >= 525.60.13"),
        ({"torch": "2.8.0", "cuda": "12.8", "python": "3.9"}, "tabbyapi needs Python >=3.10; 3.9 is outside it"),
    ],
)
def test_refusals_say_why(matrix, request_kw, error):
    result = resolve_stack(StackRequest(**request_kw), matrix)
    assert not result.ok
    assert any(e.startswith(error) for e in result.errors), result.errors


def test_exllamav3_0_0_37_without_flash_attn_is_refused(matrix, tmp_path):
    """0.0.30-0.0.43 import flash_attn unconditionally: a stack without it must not resolve."""
    from dataclasses import replace

    stripped = replace(matrix, wheels=[w for w in matrix.wheels if w.package != "flash-attn"])
    result = resolve_stack(StackRequest("2.9.0", "12.8", pins=("exllamav3==0.0.37",)), stripped)
    assert not result.ok
    assert any("import flash_attn unconditionally" in e for e in result.errors)
    newer = resolve_stack(StackRequest("2.9.0", "12.8", pins=("exllamav3==1.4.2",)), stripped)
    assert newer.ok  # 1.x treats flash-attn as optional
    assert "83% slower" in {a.name: a.reason for a in newer.absent}["flash-attn"]


def test_exllamav3_pins_the_exact_torch(matrix):
    result = resolve(matrix, "2.9.1", "12.8", pins=("exllamav3==0.0.37",))
    absent = {a.name: a.reason for a in result.absent}
    assert "pin torch==2.9.0 in their metadata: torch 2.9.1 cannot be installed beside them" in absent["exllamav3"]
    assert not result.ok
    # unpinned, the newest that installs beside torch 2.9.1 is 0.0.31: the last release before the torch pin
    assert labels(resolve(matrix, "2.9.1", "12.8"))["exllamav3"] == "0.0.31+cu128"


def test_no_cuda_picks_the_highest_the_driver_runs(matrix):
    assert labels(resolve(matrix, "2.11.0", None, driver="575.51"))["torch"] == "2.11.0+cu128"
    assert labels(resolve(matrix, "2.11.0", None, driver="580.65.06"))["torch"] == "2.11.0+cu130"
    assert labels(resolve(matrix, "2.11.0+cu126", None))["torch"] == "2.11.0+cu126"


def test_short_torch_version_means_newest_patch(matrix):
    assert labels(resolve(matrix, "2.12", "13.0", only=("torch",)))["torch"] == "2.12.1+cu130"


def test_json_has_exactly_the_documented_keys(matrix):
    data = resolve(matrix, "2.11.0", "13.0").to_json()
    assert list(data) == ["ok", "wheels", "absent", "errors"]
    assert all(list(w) == ["name", "version", "url", "sha256", "reason"] for w in data["wheels"])
    assert all(list(a) == ["name", "reason"] for a in data["absent"])
    assert {w["name"] for w in data["wheels"]} == {"torch", "exllamav3", "flash-attn", "flash-linear-attention",
                                                  "fla-core"}


@pytest.mark.parametrize(
    ("request_kw", "message"),
    [
        ({"torch": "banana"}, "--torch 'banana' is not a torch version: give one like 2.11.0"),
        ({"torch": "2"}, "--torch '2' needs at least major.minor"),
        ({"torch": "2.11.0", "cuda": "thirteen"}, "--cuda 'thirteen' is not a CUDA version"),
        ({"torch": "2.11.0", "python": "python3"}, "--python 'python3' is not a CPython version"),
        ({"torch": "2.11.0", "driver": "latest"}, "--driver 'latest' is not an NVIDIA driver version"),
        ({"torch": "2.11.0", "engine": "sglang"}, "--engine 'sglang' is unknown: use one of exllamav3, tabbyapi, vllm"),
        ({"torch": "2.11.0", "pins": ("numpy==2",)}, "--pin 'numpy==2': numpy is not in the matrix"),
        ({"torch": "2.11.0", "pins": ("exllamav3 = = 1",)}, "--pin 'exllamav3 = = 1' is not a requirement"),
        ({"torch": "2.11.0", "platform": "macos"}, "--platform 'macos' is unknown"),
    ],
)
def test_unparsable_input_is_bad_input(matrix, request_kw, message):
    with pytest.raises(BadInput) as info:
        resolve_stack(StackRequest(**request_kw), matrix)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_todays_newest_torch_resolves_and_the_refusal_names_the_nearest_build(matrix):
    """torch 2.15.0 came from the PyPI refresh (CUDA 13.2 from its Requires-Dist); exllamav3 has no prebuilt
    wheel for it: the refusal says which torch minors it has builds for, the nearest, and that PyPI's is JIT."""
    resolution = resolve_stack(StackRequest(torch="2.15.0", python="3.12", engine="exllamav3"), matrix)
    (torch,) = resolution.chosen("torch")
    assert torch.wheel.version == "2.15.0" and torch.wheel.cuda == "13.2" and torch.wheel.source == "pypi.org"
    assert not resolution.ok
    error = resolution.errors[0]
    assert error.startswith("exllamav3: no wheel built for torch 2.15 (prebuilt for torch 2.7 .. 2.11; "
                            "nearest torch with one: 2.11, exllamav3 1.4.2)"), error
    assert "exllamav3 1.6.5 on pypi.org is a JIT wheel" in error
    flash = next(a for a in resolution.absent if a.component == "flash_attn")
    assert "nearest torch with one: 2.13" in flash.reason


def test_latest_prebuilt_stack_resolves_to_the_nearest_the_refusal_names(matrix):
    from labwright.matrix.stacks import get_stack, request_for

    resolution = resolve_stack(request_for(get_stack("latest-prebuilt", matrix)), matrix)
    assert resolution.ok, resolution.errors
    versions = {c.component: c.wheel.version for c in resolution.wheels}
    assert versions["torch"] == "2.11.0+cu130"
    assert versions["exllamav3"].startswith("1.4.2+") and versions["exllamav3"].endswith("torch2.11.0")
    assert versions["flash_attn"] == "2.8.3+cu130torch2.11"
