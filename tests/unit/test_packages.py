"""Every folder of Python modules under src/labwright is a package (has ``__init__.py``): setup.py finds the wheel's
packages with ``find_packages``, which skips a folder without one, so its modules were missing from the wheel while an
editable install (and every test run from the checkout) still imported them as a namespace package. Found by
scripts/wheel-check: ``No module named 'labwright.gateway'`` from the installed wheel."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "labwright"


def test_every_folder_of_modules_is_a_package_the_wheel_ships() -> None:
    missing = sorted(str(folder.relative_to(SRC.parent)) for folder in [SRC, *SRC.rglob("*")]
                     if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py"))
                     and not (folder / "__init__.py").exists())
    assert not missing, f"folders of modules without __init__.py (left out of the wheel by find_packages): {missing}"
