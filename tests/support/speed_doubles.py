"""A stand-in nvidia-smi for `labwright kv bandwidth`: answers ``--query-gpu=F1,F2 --format=csv,noheader[,nounits]``
for the fields the bandwidth reading asks (index, name, memory.total, clocks.max.memory, memory.bus_width) the way
the real one answers a query (tests/conformance/nvidia-smi/: values in the order asked, joined by ", "; a field it
does not know fails the whole query with ``Field "X" is not a valid field to query.``, an empty line, exit 2).

The values are an RTX 4090's as nvidia-smi reports them: 24,564 MiB, a maximum memory clock of 10,501 MHz (GDDR6X
at 21 Gbps moves two transfers per clock) and a 384-bit bus, which make NVIDIA's specified 1,008 GB/s.
"""

from __future__ import annotations

import shlex
from pathlib import Path

RTX_4090 = {"index": "0", "name": "NVIDIA GeForce RTX 4090", "memory.total": "24564 MiB",
            "clocks.max.memory": "10501 MHz", "memory.bus_width": "384 bit"}


def write_nvidia_smi(path: Path, gpu: dict[str, str] = RTX_4090, refuse: tuple[str, ...] = ()) -> Path:
    """An executable nvidia-smi at ``path`` for one GPU; ``refuse``: fields this driver does not know."""
    cases = "\n".join(f"    {shlex.quote(key)}) v={shlex.quote(value)};;" for key, value in gpu.items())
    refused = " ".join(shlex.quote(f) for f in refuse)
    path.write_text(
        "#!/bin/sh\nq=; fmt=\nfor a in \"$@\"; do case \"$a\" in --query-gpu=*) q=${a#--query-gpu=};; "
        "--format=*) fmt=${a#--format=};; esac; done\n"
        "[ -n \"$q\" ] || { echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; "
        "exit 9; }\n"
        f"for f in $(echo \"$q\" | tr ',' ' '); do for r in {refused or '_none_'}; do if [ \"$f\" = \"$r\" ]; then "
        "echo \"Field \\\"$f\\\" is not a valid field to query.\"; echo; exit 2; fi; done; done\n"
        "line=\nfor f in $(echo \"$q\" | tr ',' ' '); do\n  case \"$f\" in\n" + cases +
        "\n    *) echo \"Field \\\"$f\\\" is not a valid field to query.\"; echo; exit 2;;\n  esac\n"
        "  case \"$fmt:$v\" in *nounits*' MiB'|*nounits*' MHz'|*nounits*' bit') v=${v% *};; esac\n"
        "  line=\"${line:+$line, }$v\"\ndone\n"
        "printf '%s\\n' \"$line\"\n")
    path.chmod(0o755)
    return path
