"""Reading wheels_matrix/: where it is found, and one clear line for each broken file."""

from __future__ import annotations

import shutil

import pytest

from labwright.errors import BadInput
from labwright.matrix.load import ENV_VAR, load_matrix, matrix_dir, wheels_from_rows
from labwright.paths import packaged_matrix_dir

MATRIX_DIR = packaged_matrix_dir()
ROW = {"package": "fla-core", "version": "0.6.0", "python": "py3", "abi": "none", "platform": "any", "torch": "",
       "cuda": "", "cxx11_abi": "", "url": "https://x.invalid/fla_core-0.6.0-py3-none-any.whl", "source": "pypi"}


@pytest.fixture
def small(tmp_path):
    for name in ("components.toml", "cuda.toml", "stacks.toml", "fla.toml"):
        shutil.copy(MATRIX_DIR / name, tmp_path / name)
    return tmp_path


def test_repo_matrix_is_found_without_configuration(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert matrix_dir() == MATRIX_DIR


def test_env_var_wins(monkeypatch, small):
    monkeypatch.setenv(ENV_VAR, str(small))
    assert matrix_dir() == small
    matrix = load_matrix(small)
    assert {w.package for w in matrix.wheels} == {"flash-linear-attention", "fla-core"}
    assert set(matrix.stacks) >= {"A", "B", "C", "D"} and matrix.cuda["13"].release_drivers["13.0"] == "580.65.06"


def test_env_var_pointing_nowhere_is_bad_input(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(BadInput, match=f"{ENV_VAR}=.*missing has no components.toml"):
        matrix_dir()


def test_broken_toml_names_the_file(small):
    (small / "extra.toml").write_text("wheels = [ { package = \n")
    with pytest.raises(BadInput, match="extra.toml is not valid TOML"):
        load_matrix(small)


def test_rows_with_unknown_or_missing_fields_are_refused():
    assert wheels_from_rows([ROW], "t.toml")[0].filename == "fla_core-0.6.0-py3-none-any.whl"
    with pytest.raises(BadInput, match="t.toml wheel 1: unknown field\\(s\\) \\['colour'\\]"):
        wheels_from_rows([{**ROW, "colour": "red"}], "t.toml")
    missing = {k: v for k, v in ROW.items() if k != "url"}
    with pytest.raises(BadInput, match="t.toml wheel 1: .*every row needs"):
        wheels_from_rows([missing], "t.toml")


def test_row_round_trip_omits_only_empty_optional_fields():
    wheel = wheels_from_rows([{**ROW, "sha256": "0" * 64}], "t.toml")[0]
    row = wheel.to_row()
    assert row["sha256"] == "0" * 64 and row["torch"] == "" and "release" not in row
