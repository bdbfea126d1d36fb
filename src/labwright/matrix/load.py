"""Read the wheels matrix (wheels_matrix/*.toml) into a Matrix.

Where the data lives: $LABWRIGHT_MATRIX_DIR if set, else the matrix packaged with labwright (``wheels_matrix/`` in a
checkout, ``labwright/data/matrix`` in a wheel; read through importlib.resources, so both read the same files).
Files with a `wheels` array are wheel lists written by `labwright matrix refresh`; cuda.toml, components.toml and
stacks.toml are hand-written.
"""

from __future__ import annotations

import os
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from labwright import paths, textio
from labwright.errors import BadInput
from labwright.matrix.model import (
    WHEEL_FIELDS,
    Component,
    CudaFloor,
    Engine,
    EngineNeed,
    Matrix,
    SeedDispute,
    Stack,
    Wheel,
)

ENV_VAR = "LABWRIGHT_MATRIX_DIR"
META_FILES = ("cuda.toml", "components.toml", "stacks.toml")


def matrix_dir() -> Path:
    """The wheels matrix directory to read (see the module docstring for the order)."""
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env)
        if not (path / "components.toml").is_file():
            raise BadInput(f"{ENV_VAR}={env} has no components.toml: point it at a wheels matrix directory")
        return path
    return paths.packaged_matrix_dir()


def _read(path: Path) -> dict[str, Any]:
    """A matrix TOML, its shape checked (labwright.schema.files: one line naming the file and the key)."""
    what = "a wheels matrix TOML"
    data = textio.read_toml(path, f"{what} (re-run `labwright matrix refresh` for a generated one)")
    from labwright.schema import files  # pydantic: only where the matrix is read

    files.check(files.MATRIX_FILES.get(path.name, files.WheelsFile), data, path, what,
                "fix it, or restore it from the matrix labwright ships (or re-run `labwright matrix refresh` for a "
                "generated one)")
    return data


def _spec(text: str, where: str) -> SpecifierSet:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier as exc:
        raise BadInput(f"{where}: {text!r} is not a version specifier: write one like '>=0.0.30,<1.0.0'") from exc


def wheels_from_rows(rows: list[dict[str, Any]], where: str) -> list[Wheel]:
    wheels = []
    for index, row in enumerate(rows, 1):
        unknown = set(row) - set(WHEEL_FIELDS)
        if unknown:
            raise BadInput(f"{where} wheel {index}: unknown field(s) {sorted(unknown)}: allowed are {WHEEL_FIELDS}")
        try:
            wheels.append(Wheel(**{k: str(v) for k, v in row.items()}, origin=where))
        except TypeError as exc:
            raise BadInput(f"{where} wheel {index}: {exc}: every row needs package, version, python, abi, "
                           "platform, torch, cuda, cxx11_abi and url") from exc
    return wheels


def _cuda(data: dict[str, Any]) -> dict[str, CudaFloor]:
    floors = {}
    for major, body in data.get("majors", {}).items():
        floors[str(major)] = CudaFloor(
            major=str(major),
            compat_driver=str(body["compat_driver"]),
            release_drivers={str(k): str(v) for k, v in body.get("releases", {}).items()},
        )
    return floors


def read_components(path: Path) -> dict[str, Component]:
    """The components declared in a components.toml (refresh needs them before any matrix exists)."""
    return _components(_read(path))


def _components(data: dict[str, Any]) -> dict[str, Component]:
    out = {}
    for name, body in data.get("components", {}).items():
        out[name] = Component(
            name=name,
            display=body.get("display", name),
            packages=tuple(body["packages"]),
            pure_python=bool(body.get("pure_python", False)),
            requires_torch=body.get("requires_torch", ""),
            pins_build_torch_since=body.get("pins_build_torch_since", ""),
            cxx11_abi_since=body.get("cxx11_abi_since", ""),
            fallback=body.get("fallback", ""),
        )
    return out


def _engines(data: dict[str, Any], where: str) -> dict[str, Engine]:
    out = {}
    for name, body in data.get("engines", {}).items():
        needs = tuple(
            EngineNeed(component=n["component"], when=_spec(n["when"], f"{where} engines.{name}"), reason=n["reason"])
            for n in body.get("needs", [])
        )
        out[name] = Engine(
            name=name,
            components=tuple(body["components"]),
            required=tuple(body.get("required", [])),
            requires_python=_spec(body.get("requires_python", ""), f"{where} engines.{name}"),
            engine_component=body.get("engine_component", ""),
            needs=needs,
            note=body.get("note", ""),
        )
    return out


def _stacks(data: dict[str, Any]) -> dict[str, Stack]:
    out = {}
    for name, body in data.get("stacks", {}).items():
        out[name] = Stack(
            name=name,
            description=body.get("description", ""),
            torch=str(body["torch"]),
            cuda=str(body["cuda"]),
            python=str(body["python"]),
            engine=body.get("engine", "tabbyapi"),
            pins=tuple(body.get("pins", [])),
            only=tuple(body.get("only", [])),
            source=body.get("source", ""),
            seed={k: str(v) for k, v in body.get("seed", {}).items()},
            disputed=tuple(SeedDispute(**d) for d in body.get("disputed", [])),
            upstream_urls=tuple(body.get("upstream_urls", [])),
        )
    return out


def _one_row_per_url(wheels: list[Wheel]) -> list[Wheel]:
    """A wheel listed by two files (a curated listing and a registry refresh of the same index) is one row: the
    first file's (files are read in name order), with the sha256 and first-seen day the other knew."""
    first: dict[str, int] = {}
    out: list[Wheel] = []
    for wheel in wheels:
        at = first.get(wheel.url)
        if at is None:
            first[wheel.url] = len(out)
            out.append(wheel)
            continue
        known = out[at]
        if (not known.sha256 and wheel.sha256) or (not known.seen and wheel.seen):
            out[at] = replace(known, sha256=known.sha256 or wheel.sha256, seen=known.seen or wheel.seen)
    return out


@lru_cache(maxsize=4)
def _load(root: str) -> Matrix:
    path = Path(root)
    components = _read(path / "components.toml")
    wheels: list[Wheel] = []
    for file in sorted(path.glob("*.toml")):
        if file.name in META_FILES:
            continue
        data = _read(file)
        if "wheels" in data:
            wheels.extend(wheels_from_rows(data["wheels"], str(file)))
    wheels = _one_row_per_url(wheels)
    stacks_file = path / "stacks.toml"
    cuda_file = path / "cuda.toml"
    return Matrix(
        wheels=wheels,
        cuda=_cuda(_read(cuda_file)) if cuda_file.is_file() else {},
        components=_components(components),
        engines=_engines(components, str(path / "components.toml")),
        stacks=_stacks(_read(stacks_file)) if stacks_file.is_file() else {},
        root=str(path),
    )


def load_matrix(root: Path | str | None = None) -> Matrix:
    """The matrix in `root` (default: matrix_dir()); cached per directory, so call it freely."""
    return _load(str(Path(root) if root else matrix_dir()))
