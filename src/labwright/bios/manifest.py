"""The JSON manifest beside each backup image (schema ``labwright.bios-backup/1``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from labwright.atomic import write_text_atomic
from labwright.errors import BadInput
from labwright.textio import loads_json

SCHEMA = "labwright.bios-backup/1"


def manifest_path(image: Path) -> Path:
    return image.with_suffix(".json")


def write(path: Path, manifest: dict[str, Any]) -> None:
    """Write atomically (temp file, fsync, rename), so a manifest is whole or absent."""
    write_text_atomic(path, json.dumps(manifest, indent=2) + "\n")


def load(path: Path) -> dict[str, Any]:
    try:
        data = loads_json(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: not UTF-8 text (byte at offset {exc.start}), not a labwright manifest; move it "
                       "away or restore it from the backup copy") from None
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: not a readable labwright manifest ({exc}); move it away or restore it from the "
                       "backup copy") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BadInput(f"{path}: not a {SCHEMA} manifest")
    from labwright.schema import files  # pydantic: only where a manifest is read

    files.check(files.BiosManifest, data, path, f"a {SCHEMA} manifest",
                "move it away (the next `labwright bios backup` writes it again) or restore it from the backup copy")
    return data
