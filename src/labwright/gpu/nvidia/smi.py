"""nvidia-smi's CSV query: the one command every part of labwright asks it with, and its output parsed (pure).

``nvidia-smi --query-gpu=index,name,uuid,compute_cap,driver_version,memory.total --format=csv,noheader`` prints one
line per GPU, fields joined by ", " in the order asked (nvidia-smi(1), "--format=csv"; ``--help-query-gpu`` defines
``compute_cap`` as "The CUDA Compute Capability, represented as Major DOT Minor"). Without ``nounits`` memory reads
"24576 MiB". A field the GPU cannot report is "[N/A]"; errors (no driver, NVML mismatch) are plain lines such as
"Failed to initialize NVML: Driver/library version mismatch", which are not GPUs.

A field this nvidia-smi does not know fails the WHOLE query: it prints ``Field "NAME" is not a valid field to
query.`` and exits 2 ("A supplied argument or flag is invalid", nvidia-smi(1) RETURN VALUE), listing no GPU at all.
The 470 branch has no ``compute_cap`` (its ``--help-query-gpu`` lists none: nvidia-smi 470.182.03 in
huggingface/candle#733, 470.256.02 in canonical/inference-snaps#89; recorded in tests/conformance/nvidia-smi/), so
``query_command`` asks again without each field so named, any field, and says which it dropped; ``parse_gpu_query``
then reads the capability from the GPU's name (labwright/data/gpu-arch.toml ``[[model]]``) or leaves it unknown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from labwright.gpu.arch import capability_from_name
from labwright.shell import quote
from labwright.textio import ascii_digits

FIELDS = ("index", "name", "uuid", "compute_cap", "driver_version", "memory.total")
_CAP = re.compile(r"(?a)^\d{1,2}\.\d$")
#: nvidia-smi's refusal of a field it does not know (the whole query fails; exit 2).
REJECTED = re.compile(r'^Field "(?P<field>[^"\n]*)" is not a valid field to query\.\s*$', re.M)
#: The lines ``query_command`` adds to nvidia-smi's output (none of nvidia-smi's own lines starts with "@@").
MARK = "@@labwright-smi-"


def query_command(fields: tuple[str, ...] = FIELDS, *, smi: str = "nvidia-smi", timeout: int | None = 20,
                  nounits: bool = False) -> str:
    """One POSIX-sh compound command: ``smi --query-gpu=FIELDS --format=csv,noheader[,nounits]``, asked again
    without a field each time nvidia-smi refuses one by name (``Field "X" is not a valid field to query.``, a
    non-zero exit), then nvidia-smi's last output (stdout and stderr) after three marker lines: each dropped field
    (``@@labwright-smi-rejected X``), the fields that last query asked (``@@labwright-smi-fields a,b``; empty when
    every one was refused) and its exit status (``@@labwright-smi-exit N``). No sed or awk: it runs in minimal
    guests. ``parse_query`` reads it."""
    fmt = "csv,noheader" + (",nounits" if nounits else "")
    run = (f"timeout {int(timeout)} " if timeout else "") + smi
    return (
        "{ q=" + quote(",".join(fields)) + "; while :; do "
        f"out=$({run} --query-gpu=\"$q\" --format={fmt} 2>&1); rc=$?; bad=; "
        "case \"$out\" in *'\" is not a valid field to query.'*) if [ \"$rc\" -ne 0 ]; then "
        "bad=${out#*Field \\\"}; bad=${bad%%\\\" is not a valid field to query.*}; fi;; esac; "
        "[ -n \"$bad\" ] || break; "
        "new=; ifs=$IFS; IFS=,; for f in $q; do [ \"$f\" = \"$bad\" ] || new=${new:+$new,}$f; done; IFS=$ifs; "
        "[ \"$new\" != \"$q\" ] || break; "
        f"echo \"{MARK}rejected $bad\"; q=$new; [ -n \"$q\" ] || break; done; "
        f"echo \"{MARK}fields $q\"; echo \"{MARK}exit $rc\"; printf '%s\\n' \"$out\"; }}"
    )


#: The query whose output ``parse_gpu_query`` reads (kept for callers that embed it in a larger command).
SMI_QUERY = query_command()


@dataclass(frozen=True)
class SmiQuery:
    """``query_command``'s output read back: the fields the last query asked, those nvidia-smi refused, its exit
    status (None: not known, e.g. a bare recorded output) and its own text without the marker lines."""

    fields: tuple[str, ...]
    rejected: tuple[str, ...]
    exit: int | None
    text: str
    rows: list[dict[str, str | None]] = field(default_factory=list)


def _value(text: str) -> str | None:
    text = text.strip()
    return None if not text or text.startswith("[") else text


def parse_query(text: str, fields: tuple[str, ...] = FIELDS) -> SmiQuery:
    """The rows of ``query_command``'s output, each ``{field: value or None}`` ([N/A] and the like are None), in the
    fields its marker line names (``fields`` for output without one: a bare nvidia-smi run); a refusal line, and
    lines that do not have exactly that many values or whose ``index`` is not a number, are not rows (errors)."""
    asked: tuple[str, ...] | None = None
    rejected: list[str] = []
    code: int | None = None
    own: list[str] = []
    for line in text.splitlines():
        if line.startswith(MARK + "fields"):
            asked = tuple(f for f in line.removeprefix(MARK + "fields").strip().split(",") if f)
        elif line.startswith(MARK + "rejected "):
            rejected.append(line.removeprefix(MARK + "rejected ").strip())
        elif line.startswith(MARK + "exit "):
            value = line.removeprefix(MARK + "exit ").strip()
            code = int(value) if ascii_digits(value) else None
        else:
            own.append(line)
    names = fields if asked is None else asked
    body = "\n".join(own)
    rejected += [m.group("field") for m in REJECTED.finditer(body) if m.group("field") not in rejected]
    rows: list[dict[str, str | None]] = []
    for line in own if names else ():
        parts = [p.strip() for p in line.split(", ")]
        if REJECTED.match(line) or len(parts) != len(names):
            continue
        if "index" in names and not ascii_digits(parts[names.index("index")]):
            continue
        rows.append({name: _value(part) for name, part in zip(names, parts, strict=True)})
    return SmiQuery(names, tuple(rejected), code, body, rows)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    compute_cap: str | None  # "8.6"; None where nvidia-smi says [N/A], or has no such field and the name is unknown
    driver_version: str | None
    memory_mib: int | None
    #: where compute_cap comes from: "nvidia-smi"; "name" (gpu-arch.toml's [[model]] rows, for an nvidia-smi that
    #: refused the field); "" (not known)
    compute_cap_from: str = "nvidia-smi"


def gpus_of(query: SmiQuery) -> list[GpuInfo]:
    gpus = []
    for position, row in enumerate(query.rows):
        index = row.get("index")
        name = row.get("name") or ""
        cap = row.get("compute_cap")
        source = "nvidia-smi"
        if not (cap and _CAP.match(cap)):
            cap, source = None, ""
        if "compute_cap" not in query.fields:  # refused (or never asked): the name says, where gpu-arch.toml knows it
            cap = capability_from_name(name) if name else None
            source = "name" if cap else ""
        memory = row.get("memory.total")
        mib = re.match(r"(?a)^(\d{1,12})(?![0-9])", memory) if memory else None
        gpus.append(GpuInfo(int(index) if index and ascii_digits(index) else position, name, row.get("uuid") or "",
                            cap, row.get("driver_version"), int(mib.group(1)) if mib else None, source))
    return gpus


def parse_gpu_query(text: str) -> list[GpuInfo]:
    """GPUs from ``query_command()``'s output (or a bare run of the FIELDS query); error lines and anything
    malformed are skipped; a refused ``compute_cap`` is read from the GPU's name where gpu-arch.toml knows it
    (an "[N/A]" answer stays None: the driver's own word)."""
    return gpus_of(parse_query(text))


def smi_text(text: str) -> str:
    """nvidia-smi's own lines of ``query_command``'s output (the marker lines removed), for messages."""
    return parse_query(text).text
