"""Named stacks: the seed's A-D row by row against the resolver, the disputes proven by the checker."""

from __future__ import annotations

import pytest

from labwright.errors import BadInput
from labwright.matrix.check import BROKEN, check_requirements
from labwright.matrix.load import load_matrix
from labwright.matrix.model import Wheel
from labwright.matrix.stacks import (
    AGREES,
    DIFFERS,
    DISPUTED,
    compare_with_seed,
    option_matches,
    parse_cell,
    resolve_named_stack,
    short_label,
)
from labwright.paths import packaged_matrix_dir

MATRIX_DIR = packaged_matrix_dir()

# The seed's table exactly as published (field note 001, docs/field-notes.md): stacks.toml must keep it verbatim.
SEED_TABLE = {
    "A": ("2.9.0+cu128", "0.0.37+cu128", "2.8.3+cu128 ✓", "1.6.2.post1 ✓", "✓"),
    "B": ("2.10.0+cu128", "0.0.37+cu128", "2.8.3+cu128 or +cu130 ✓", "1.6.2.post1 ✓", "✓"),
    "C": ("2.11.0+cu130", "0.0.37+cu132", "2.8.3+cu130 ✓", "✗ no wheel", "✓"),
    "D": ("2.12.0+cu130", "0.0.37+cu132", "2.8.3+cu130 or +cu132 ✓", "✗", "✓"),
}
COLUMNS = ("torch", "exllamav3", "flash_attn", "causal_conv1d", "fla")


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(MATRIX_DIR)


def test_stacks_toml_keeps_the_seed_table_verbatim(matrix):
    for name, row in SEED_TABLE.items():
        assert tuple(matrix.stacks[name].seed[c] for c in COLUMNS) == row


@pytest.mark.parametrize("name", sorted(SEED_TABLE))
def test_seed_rows_agree_except_the_recorded_disputes(matrix, name):
    stack, resolution = resolve_named_stack(name, matrix)
    status = {c.component: c.status for c in compare_with_seed(stack, resolution)}
    expected = {c: AGREES for c in COLUMNS}
    expected.update({"B": {"flash_attn": DISPUTED}, "D": {"exllamav3": DISPUTED}}.get(name, {}))
    assert status == expected


def test_dispute_b_is_what_the_checker_says(matrix):
    """B's `or +cu130`: a CUDA 13 flash-attn beside torch 2.10.0+cu128."""
    [verdict] = check_requirements([("seed B", "flash_attn-2.8.3+cu130torch2.10-cp312-cp312-linux_x86_64.whl")],
                                   "2.10.0+cu128", matrix)
    assert verdict.status == BROKEN and "built for CUDA 13.0" in verdict.line()
    assert "libcudart.so.13" in matrix.stacks["B"].disputed[0].reason


def test_dispute_d_is_what_the_checker_says(matrix):
    [verdict] = check_requirements([("seed D", "exllamav3==0.0.37+cu132.torch2.11.0")], "2.12.0+cu130", matrix)
    assert verdict.status == BROKEN and "built for torch 2.11.0, not torch 2.12.0" in verdict.line()


def test_d_other_option_cu132_is_accepted(matrix):
    [verdict] = check_requirements([("seed D", "flash-attn==2.8.3+cu132torch2.12")], "2.12.0+cu130", matrix)
    assert verdict.status != BROKEN


@pytest.mark.parametrize(
    ("cell", "parsed"),
    [
        ("2.8.3+cu128 or +cu130 ✓", (True, ["2.8.3+cu128", "2.8.3+cu130"])),
        ("1.6.2.post1 ✓", (True, ["1.6.2.post1"])),
        ("✓", (True, [])),
        ("✗ no wheel", (False, [])),
        ("✗", (False, [])),
        ("2.9.0+cu128", (True, ["2.9.0+cu128"])),
    ],
)
def test_parse_cell(cell, parsed):
    assert parse_cell(cell) == parsed


def wheel(package, version, cuda):
    return Wheel(package, version, "cp312", "cp312", "linux_x86_64", "2.9", cuda, "", "https://x.invalid/a.whl")


def test_option_matching_is_by_version_and_cuda_label():
    fa = wheel("flash-attn", "2.8.3+cu128torch2.9", "12.8")
    assert option_matches("2.8.3+cu128", fa)
    assert option_matches("2.8.3", fa)
    assert not option_matches("2.8.3+cu130", fa)
    assert not option_matches("2.8.2+cu128", fa)
    torch = wheel("torch", "2.9.0+cu128", "12.8")
    assert option_matches("2.9.0+cu128", torch) and not option_matches("2.9.0+cu126", torch)
    assert short_label(fa) == "2.8.3+cu128" and short_label(torch) == "2.9.0+cu128"
    assert short_label(wheel("fla-core", "0.6.0", "")) == "0.6.0"


def test_an_undisputed_contradiction_is_reported_as_differs(matrix):
    from dataclasses import replace

    stack = replace(matrix.stacks["B"], disputed=())  # drop the recorded reason: the cell must not pass silently
    _, resolution = resolve_named_stack("B", matrix)
    assert {c.component: c.status for c in compare_with_seed(stack, resolution)}["flash_attn"] == DIFFERS


def test_unknown_stack_is_bad_input(matrix):
    with pytest.raises(BadInput, match="stack 'E' is unknown: use one of A, B, C, D, tabbyapi-cu12, tabbyapi-cu13"):
        resolve_named_stack("E", matrix)
