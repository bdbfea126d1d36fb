"""nvidia-smi's CSV query output, parsed (pure).

``nvidia-smi --query-gpu=index,name,uuid,compute_cap,driver_version,memory.total --format=csv,noheader`` prints one
line per GPU, fields joined by ", " in the order asked (nvidia-smi(1), "--format=csv"; ``--help-query-gpu`` defines
``compute_cap`` as "The CUDA Compute Capability, represented as Major DOT Minor", present since driver 510). Without
``nounits`` memory reads "24576 MiB". A field the GPU cannot report is "[N/A]"; errors (no driver, NVML mismatch)
are plain lines such as "Failed to initialize NVML: Driver/library version mismatch", which are not GPUs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FIELDS = ("index", "name", "uuid", "compute_cap", "driver_version", "memory.total")
#: The query whose output ``parse_gpu_query`` reads.
SMI_QUERY = f"nvidia-smi --query-gpu={','.join(FIELDS)} --format=csv,noheader"
_CAP = re.compile(r"^\d{1,2}\.\d$")


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    compute_cap: str | None  # "8.6"; None where nvidia-smi says [N/A] (drivers < 510 reject the field outright)
    driver_version: str | None
    memory_mib: int | None


def _value(text: str) -> str | None:
    text = text.strip()
    return None if not text or text.startswith("[") else text


def parse_gpu_query(text: str) -> list[GpuInfo]:
    """GPUs from the query's lines; error lines and anything malformed are skipped."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(", ")]
        if len(parts) != len(FIELDS) or not parts[0].isdigit():
            continue
        cap = _value(parts[3])
        memory = _value(parts[5])
        mib = re.match(r"^(\d+)", memory) if memory else None
        gpus.append(GpuInfo(int(parts[0]), parts[1], parts[2], cap if cap and _CAP.match(cap) else None,
                            _value(parts[4]), int(mib.group(1)) if mib else None))
    return gpus
