"""The cache and data roots come from the environment and are checked where they are read (labwright.paths), for
the CLI and for a pyinfra deploy alike: the sweep at 2b91fd1 met XDG_CACHE_HOME=/proc/nope as a FileNotFoundError
traceback in the llama.cpp deploy, and XDG_CACHE_HOME=relative/cache resolved against the current directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labwright import paths
from labwright.errors import BadInput


@pytest.mark.parametrize("variable, value, said", [
    ("XDG_CACHE_HOME", "/proc/nope", "kernel filesystem"),
    ("LABWRIGHT_CACHE", "/dev/null", "kernel filesystem"),
    ("LABWRIGHT_CACHE", "relative/cache", "not an absolute path"),
    ("XDG_DATA_HOME", "/tmp/a\nb", "control character"),
])
def test_junk_is_one_line_naming_the_variable(monkeypatch, variable, value, said):
    monkeypatch.delenv("LABWRIGHT_CACHE", raising=False)
    monkeypatch.setenv(variable, value)
    with pytest.raises(BadInput, match=f"^{variable}=.*{said}"):
        paths.data_root() if variable == "XDG_DATA_HOME" else paths.cache_root()


def test_a_file_in_the_way_is_named(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path / "file" / "cache"))
    with pytest.raises(BadInput, match=f"{tmp_path / 'file'} is a file"):
        paths.cache_root()


def test_a_relative_xdg_path_is_ignored_as_the_spec_says(monkeypatch):
    monkeypatch.delenv("LABWRIGHT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert paths.cache_root() == Path("~/.cache/labwright").expanduser()


@given(st.text(max_size=30))
def test_any_value_is_a_usable_root_or_one_refusal(value):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LABWRIGHT_CACHE", value.replace("\x00", "")) if "\x00" not in value else None
        try:
            root = paths.cache_root()
        except BadInput as refused:
            assert "\n" not in str(refused)
            return
        assert root.is_absolute()
