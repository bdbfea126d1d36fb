"""labwright.gpu.arch: compute capability -> CUDA builds with kernels, and the refusal naming what to use instead."""

from __future__ import annotations

import pytest

from labwright.errors import BadInput
from labwright.gpu import arch


@pytest.mark.parametrize(("text", "cap"), [("8.6", "8.6"), ("86", "8.6"), ("sm_86", "8.6"), ("SM86", "8.6"),
                                           ("12.0", "12.0"), ("sm_120", "12.0"), (" 9.0 ", "9.0")])
def test_capability_spellings(text, cap):
    assert arch.parse_capability(text) == cap


@pytest.mark.parametrize("text", ["", "eight", "8.", "8.6.1", "sm_", "1234"])
def test_bad_capability_is_one_line_bad_input(text):
    with pytest.raises(BadInput) as info:
        arch.parse_capability(text)
    assert "compute capability" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(("text", "parsed"), [("12.8", (12, 8)), ("12.8.1", (12, 8)), ("cu128", (12, 8)),
                                              ("cu130", (13, 0)), ("13.0", (13, 0)), ("12", (12, None)),
                                              ("11.8", (11, 8))])
def test_cuda_spellings(text, parsed):
    assert arch.parse_cuda(text) == parsed


@pytest.mark.parametrize(("cuda", "cap", "ok"), [
    ("12.8", "12.0", True), ("12.6", "12.0", False), ("12.7", "12.0", False), ("13.0", "12.0", True),
    ("11.8", "9.0", True), ("11.7", "9.0", False), ("11.8", "8.9", True), ("11.7", "8.9", False),
    ("11.1", "8.6", True), ("11.0", "8.6", False), ("12.8", "10.0", True), ("12.4", "10.0", False),
    ("12.9", "6.1", True), ("13.0", "6.1", False), ("13.0", "7.0", False), ("13.0", "7.5", True),
    ("12", "8.6", True),  # a major-only label is judged on the major
])
def test_has_kernels(cuda, cap, ok):
    assert arch.has_kernels(cuda, cap) is ok


def test_blackwell_with_an_old_stack_is_refused_naming_the_stacks_that_work():
    stacks = [("A", "12.8"), ("old", "12.4"), ("C", "13.0")]
    with pytest.raises(BadInput) as info:
        arch.refuse_build("12.6", "12.0", what="stack B", alternatives=stacks)
    message = str(info.value)
    assert message.startswith("stack B (CUDA 12.6) cannot run on this GPU")
    assert "sm_120" in message and "CUDA >= 12.8" in message and message.endswith("use A or C instead")
    assert "\n" not in message


def test_no_usable_alternative_names_the_cuda_range():
    with pytest.raises(BadInput, match=r"use a CUDA >= 8.0 and <= 12.9 build instead \(none of the known stacks"):
        arch.refuse_build("13.0", "6.1", alternatives=[("C", "13.0")])


def test_a_build_with_kernels_is_not_refused():
    arch.refuse_build("12.8", "12.0", alternatives=[])
    arch.refuse_build("cu128", "sm_89")


def test_unknown_capability_names_the_data_file():
    with pytest.raises(BadInput, match="not in labwright/data/gpu-arch.toml"):
        arch.architecture("4.2")


def test_table_is_ordered_and_consistent():
    table = arch.table()
    assert {"7.5", "8.6", "8.9", "9.0", "10.0", "12.0"} <= set(table)
    for entry in table.values():
        assert arch.has_kernels(entry.min_cuda, entry.capability)  # the floor itself builds kernels
        if entry.max_cuda:
            assert not arch.has_kernels("13.0", entry.capability)


def test_the_matrix_stacks_on_a_pascal_card_keep_only_cuda_12():
    """The wiring the matrix gets: its own stacks as the alternatives. A GTX 1080 / P40 (6.1) cannot run a CUDA 13
    stack; the cu12 ones are named."""
    from labwright.matrix.load import load_matrix

    stacks = load_matrix().stacks
    alternatives = [(name, stack.cuda) for name, stack in stacks.items()]
    with pytest.raises(BadInput) as info:
        arch.refuse_build(stacks["C"].cuda, "6.1", what="stack C", alternatives=alternatives)
    cu12 = [name for name, stack in stacks.items() if stack.cuda.startswith("12.")]
    assert cu12 and all(name in str(info.value) for name in cu12)
    assert "CUDA 13.0 dropped Pascal (sm_61)" in str(info.value)
    arch.refuse_build(stacks["C"].cuda, "12.0", what="stack C", alternatives=alternatives)  # Blackwell: fine


#: Names as nvidia-smi prints them (470 already prefixes most with "NVIDIA"; older Tesla names carry none), with the
#: capability NVIDIA's CUDA GPUs page gives each, written out here, not read from gpu-arch.toml.
@pytest.mark.parametrize(("name", "cap"), [
    ("NVIDIA GeForce RTX 3090", "8.6"), ("NVIDIA GeForce RTX 3060 Laptop GPU", "8.6"), ("NVIDIA RTX A6000", "8.6"),
    ("NVIDIA A10", "8.6"), ("NVIDIA A100-SXM4-40GB", "8.0"), ("NVIDIA A100 80GB PCIe", "8.0"), ("NVIDIA A30", "8.0"),
    ("Tesla T4", "7.5"), ("NVIDIA GeForce RTX 2080 Ti", "7.5"), ("NVIDIA GeForce GTX 1660 SUPER", "7.5"),
    ("Quadro RTX 6000", "7.5"), ("NVIDIA TITAN RTX", "7.5"), ("Tesla V100-PCIE-16GB", "7.0"), ("NVIDIA TITAN V", "7.0"),
    ("Tesla P100-PCIE-16GB", "6.0"), ("Tesla P40", "6.1"), ("NVIDIA GeForce GTX 1080 Ti", "6.1"),
    ("Quadro P4000", "6.1"), ("NVIDIA TITAN Xp", "6.1"), ("NVIDIA GeForce GTX 970", "5.2"), ("Tesla M40 24GB", "5.2"),
    ("NVIDIA GeForce GTX 750 Ti", "5.0"), ("NVIDIA GeForce RTX 4090", "8.9"), ("NVIDIA RTX 6000 Ada Generation", "8.9"),
    ("NVIDIA L4", "8.9"), ("NVIDIA H100 80GB HBM3", "9.0"), ("NVIDIA GeForce RTX 5090", "12.0"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0"),
    ("Tesla K80", None), ("NVIDIA Graphics Device", None), ("", None)])
def test_capability_from_the_gpu_name(name, cap):
    assert arch.capability_from_name(name) == cap
    if cap is not None:
        assert arch.architecture(cap).capability == cap  # every row names a capability the table knows
