"""Wheel file names and local labels, as every upstream in the matrix spells them."""

from __future__ import annotations

import pytest

from labwright.errors import BadInput
from labwright.matrix.wheelname import (
    BuildLabel,
    WheelNameError,
    cuda_from_label,
    cuda_to_label,
    filename_from_url,
    parse_build_label,
    parse_wheel_filename,
    platform_family,
    platform_matches,
    python_matches,
    python_tag_for,
    torch_minor,
)


@pytest.mark.parametrize(
    ("filename", "dist", "version", "py", "abi", "plat"),
    [
        ("flash_attn-2.8.3+cu130torch2.11-cp312-cp312-linux_x86_64.whl",
         "flash_attn", "2.8.3+cu130torch2.11", "cp312", "cp312", "linux_x86_64"),
        ("flash_attn-2.8.3+cu12torch2.8cxx11abiFALSE-cp310-cp310-linux_x86_64.whl",
         "flash_attn", "2.8.3+cu12torch2.8cxx11abiFALSE", "cp310", "cp310", "linux_x86_64"),
        ("exllamav3-0.0.37+cu128.torch2.9.0-cp313-cp313-win_amd64.whl",
         "exllamav3", "0.0.37+cu128.torch2.9.0", "cp313", "cp313", "win_amd64"),
        ("flash_attn_3-3.0.0+cu130torch2.11gite2743ab-cp39-abi3-linux_x86_64.whl",
         "flash_attn_3", "3.0.0+cu130torch2.11gite2743ab", "cp39", "abi3", "linux_x86_64"),
        ("flash_attn-2.8.3+cu130torch2.12-cp314-cp314t-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
         "flash_attn", "2.8.3+cu130torch2.12", "cp314", "cp314t", "manylinux_2_24_x86_64.manylinux_2_28_x86_64"),
        ("fla_core-0.6.0-py3-none-any.whl", "fla_core", "0.6.0", "py3", "none", "any"),
        ("torch-2.9.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl",
         "torch", "2.9.0+cu128", "cp312", "cp312", "manylinux_2_28_x86_64"),
    ],
)
def test_parse_wheel_filename(filename, dist, version, py, abi, plat):
    name = parse_wheel_filename(filename)
    assert (name.distribution, name.version, name.python_tag, name.abi_tag, name.platform_tag) == (
        dist, version, py, abi, plat)
    assert name.filename == filename


def test_label_case_is_kept_and_name_canonicalised():
    name = parse_wheel_filename("flash_attn-2.8.3+cu12torch2.8cxx11abiFALSE-cp312-cp312-linux_x86_64.whl")
    assert name.name == "flash-attn"
    assert name.local == "cu12torch2.8cxx11abiFALSE"  # packaging would lower-case it
    assert name.public_version == "2.8.3"


def test_build_tag_is_separated_from_the_tags():
    name = parse_wheel_filename("causal_conv1d-1.6.2-1-cp312-cp312-linux_x86_64.whl")
    assert name.build_tag == "1" and name.version == "1.6.2" and name.python_tag == "cp312"


@pytest.mark.parametrize(
    "url",
    [
        "https://download.pytorch.org/whl/cu128/torch-2.9.0%2Bcu128-cp312-cp312-manylinux_2_28_x86_64.whl",
        "https://download.pytorch.org/whl/cu128/torch-2.9.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl",
        "/srv/wheelhouse/torch-2.9.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl",
    ],
)
def test_urls_and_paths_are_decoded(url):
    name = parse_wheel_filename(url)
    assert name.version == "2.9.0+cu128"
    assert filename_from_url(url) == "torch-2.9.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl"


@pytest.mark.parametrize(
    "bad",
    [
        "flash_attn-2.8.3.tar.gz",
        "flash_attn-2.8.3-cp312.whl",
        "flash_attn-banana-cp312-cp312-linux_x86_64.whl",
        "not a wheel",
        "",
    ],
)
def test_not_a_wheel_is_bad_input_naming_it(bad):
    with pytest.raises(WheelNameError) as info:
        parse_wheel_filename(bad)
    assert isinstance(info.value, BadInput)
    assert "is not a wheel file name" in str(info.value)
    assert "NAME-VERSION-PYTHON-ABI-PLATFORM.whl" in str(info.value)


@pytest.mark.parametrize(
    ("local", "expected"),
    [
        ("cu130torch2.11", BuildLabel(cuda="13.0", torch="2.11")),
        ("cu12torch2.8cxx11abiFALSE", BuildLabel(cuda="12", torch="2.8", cxx11_abi="FALSE")),
        ("cu12torch2.8cxx11abiTRUE", BuildLabel(cuda="12", torch="2.8", cxx11_abi="TRUE")),
        ("cu128.torch2.9.0", BuildLabel(cuda="12.8", torch="2.9", torch_build="2.9.0")),
        ("cu132.torch2.11.0", BuildLabel(cuda="13.2", torch="2.11", torch_build="2.11.0")),
        ("cu128torch2.9.0cxx11abiFALSE", BuildLabel(cuda="12.8", torch="2.9", torch_build="2.9.0", cxx11_abi="FALSE")),
        ("cu124torch2.5gite2743ab", BuildLabel(cuda="12.4", torch="2.5", rest="gite2743ab")),
        ("cu128torch2.9cxx11abitrueglibc228", BuildLabel(cuda="12.8", torch="2.9", cxx11_abi="TRUE", rest="glibc228")),
        ("cu13torch25.11cxx11abiTRUE", BuildLabel(cuda="13", ngc="25.11", cxx11_abi="TRUE")),
        ("rocm6.4.torch2.9.0", BuildLabel(rocm="6.4", torch="2.9", torch_build="2.9.0")),
        ("rocm6.2.4", BuildLabel(rocm="6.2.4")),
        ("cu128", BuildLabel(cuda="12.8")),
        ("cu118", BuildLabel(cuda="11.8")),
        ("cpu", BuildLabel(cpu=True)),
        ("cu128_torch2.10", BuildLabel(cuda="12.8", torch="2.10")),
        ("", BuildLabel()),
        ("mybuild7", BuildLabel(rest="mybuild7")),
    ],
)
def test_parse_build_label(local, expected):
    assert parse_build_label(local) == expected


def test_torch_2_10_is_not_read_as_2_1():
    assert parse_build_label("cu128torch2.10").torch == "2.10"


@pytest.mark.parametrize(
    ("digits", "cuda"),
    [("128", "12.8"), ("130", "13.0"), ("132", "13.2"), ("12", "12"), ("13", "13"), ("118", "11.8"), ("92", "9.2")],
)
def test_cuda_labels_round_trip(digits, cuda):
    assert cuda_from_label(digits) == cuda
    assert cuda_to_label(cuda) == f"cu{digits}"


def test_cuda_label_must_be_digits():
    with pytest.raises(ValueError):
        cuda_from_label("12x")


@pytest.mark.parametrize(
    ("py", "abi", "python", "fits"),
    [
        ("cp312", "cp312", "3.12", True),
        ("cp312", "cp312", "3.13", False),
        ("cp314", "cp314t", "3.14", False),
        ("cp314", "cp314t", "3.14t", True),
        ("cp314", "cp314", "3.14t", False),
        ("cp39", "abi3", "3.12", True),
        ("cp39", "abi3", "3.8", False),
        ("cp39", "abi3", "3.14t", False),
        ("py3", "none", "3.11", True),
        ("py2.py3", "none", "3.12", True),
    ],
)
def test_python_matches(py, abi, python, fits):
    assert python_matches(py, abi, python) is fits


def test_python_tag_for():
    assert python_tag_for("3.12") == "cp312"
    assert python_tag_for("3.14t") == "cp314t"


@pytest.mark.parametrize(
    ("tag", "family"),
    [
        ("linux_x86_64", {"linux_x86_64"}),
        ("manylinux_2_28_x86_64", {"linux_x86_64"}),
        ("manylinux_2_24_x86_64.manylinux_2_28_x86_64", {"linux_x86_64"}),
        ("manylinux2014_x86_64.manylinux_2_17_x86_64", {"linux_x86_64"}),
        ("manylinux_2_34_aarch64", {"linux_aarch64"}),
        ("linux_aarch64", {"linux_aarch64"}),
        ("win_amd64", {"win_amd64"}),
        ("any", {"any"}),
    ],
)
def test_platform_family(tag, family):
    assert platform_family(tag) == family


def test_platform_matches_any_and_not_other_arch():
    assert platform_matches("any", "linux_x86_64")
    assert not platform_matches("manylinux_2_34_aarch64", "linux_x86_64")
    assert not platform_matches("win_amd64", "linux_x86_64")


def test_torch_minor():
    assert torch_minor("2.11.0+cu130") == "2.11"
    assert torch_minor("2.9") == "2.9"
