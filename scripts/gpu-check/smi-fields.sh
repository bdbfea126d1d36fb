#!/bin/bash
# nvidia-smi's query as labwright asks it, on a real driver (issue 30: a field the driver does not know fails the
# whole query; labwright asks again without it). Records, for tests/conformance/nvidia-smi/, what the real nvidia-smi
# prints (stdout and stderr apart) and exits with for: labwright's fields; an unknown field in the middle; two
# unknown fields; then runs labwright.gpu.nvidia.smi.query_command through sh, with and without an unknown field, and
# prints what parse_gpu_query makes of it. Needs only Python 3.11+ and the repo (labwright.gpu.nvidia.smi is stdlib-only).
# Output: JSON on stdout. Run from the repo root:  bash scripts/gpu-check/smi-fields.sh > "$OUT/smi-fields.json"
set -u
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
exec python3 - <<'PY'
import json, subprocess, sys
from labwright.gpu.nvidia.smi import FIELDS, gpus_of, parse_query, query_command

def run(argv):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return {"argv": argv, "exit": p.returncode, "stdout": p.stdout, "stderr": p.stderr}

def sh(command):
    p = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=120)
    return p.stdout, p.returncode

out = {"version": run(["nvidia-smi", "--version"]),
       "help_compute_cap": [line for line in run(["nvidia-smi", "--help-query-gpu"])["stdout"].splitlines()
                            if "compute_cap" in line][:3]}
q = ",".join(FIELDS)
out["labwright_fields"] = run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"])
out["unknown_middle"] = run(["nvidia-smi", "--query-gpu=index,bogus_field,name", "--format=csv,noheader"])
out["two_unknown"] = run(["nvidia-smi", "--query-gpu=bogus_one,bogus_two", "--format=csv,noheader"])
out["unknown_id"] = run(["nvidia-smi", "--query-gpu=id,name,compute_cap", "--format=csv,noheader"])
for label, fields in (("labwright_query", FIELDS), ("labwright_query_with_unknown", ("index", "bogus_field", *FIELDS[1:]))):
    text, rc = sh(query_command(tuple(fields)))
    parsed = parse_query(text, tuple(fields))
    out[label] = {"sh_exit": rc, "raw": text, "rejected": list(parsed.rejected), "fields": list(parsed.fields),
                  "exit": parsed.exit, "gpus": [g.__dict__ if hasattr(g, "__dict__") else str(g) for g in gpus_of(parsed)]}
json.dump(out, sys.stdout, indent=1, default=str)
print()
PY
