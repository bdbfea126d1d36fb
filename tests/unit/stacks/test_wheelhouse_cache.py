"""labwright.wheelhouse after a killed download: a truncated wheel in the cache is removed before pip runs again
(pip would trust it: "File was already downloaded"), whole ones stay, and a marker that is not text is no
traceback, only "not complete"."""

from __future__ import annotations

import zipfile

from labwright.wheelhouse import _read_marker, remove_truncated_wheels


def test_truncated_wheels_go_whole_ones_stay(tmp_path):
    whole = tmp_path / "good-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whole, "w") as archive:
        archive.writestr("good/__init__.py", "x = 1\n" * 1000)
    data = whole.read_bytes()
    cut = tmp_path / "cut-1.0-py3-none-any.whl"
    cut.write_bytes(data[: len(data) // 2])  # what a copy killed halfway leaves
    empty = tmp_path / "empty-1.0-py3-none-any.whl"
    empty.write_bytes(b"")
    assert remove_truncated_wheels(tmp_path) == [cut, empty]
    assert sorted(p.name for p in tmp_path.iterdir()) == [whole.name]
    assert zipfile.is_zipfile(whole)


def test_a_marker_that_is_not_text_reads_as_not_complete(tmp_path):
    marker = tmp_path / ".complete"
    assert _read_marker(marker) is None
    marker.write_bytes(b"\xff\xfe\x00")
    assert _read_marker(marker) == b"\xff\xfe\x00"  # compared as bytes: never equal to a stamp, no decode error
