"""Sizes: binary units throughout (the reading that reproduces the seed), bytes when bare."""

from __future__ import annotations

import pytest

from labwright.errors import BadInput
from labwright.tuning.units import GIB, MIB, gib, group, parse_size


@pytest.mark.parametrize(("text", "expected"), [
    ("2.4GiB", int(2.4 * GIB)), ("2.4GB", int(2.4 * GIB)), ("2.4 gb", int(2.4 * GIB)), ("2.4G", int(2.4 * GIB)),
    ("2400MiB", 2400 * MIB), ("2400MB", 2400 * MIB), ("512KiB", 512 * 1024), ("1TiB", 1024 * GIB),
    ("2576980377", 2_576_980_377), ("2400000000B", 2_400_000_000), (".5GiB", GIB // 2), ("0", 0)])
def test_parse_size(text, expected):
    assert parse_size(text, "--budget") == expected


def test_bare_number_in_gib_for_the_fit_options():
    assert parse_size("8", "--vram-gb", bare_unit="GiB") == 8 * GIB
    assert parse_size("7807MiB", "--vram-gb", bare_unit="GiB") == 7807 * MIB


@pytest.mark.parametrize("text", ["", "lots", "-1GiB", "2.4XB", "1e9", "2,4GB", "GiB"])
def test_not_a_size(text):
    with pytest.raises(BadInput, match="is not a size"):
        parse_size(text, "--budget")


def test_formatting():
    assert (gib(int(2.4 * GIB)), group(16384)) == ("2.40 GiB", "16,384")
