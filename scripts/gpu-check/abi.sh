#!/bin/bash
# On a machine with an NVIDIA GPU and a CUDA torch (the lent H100/H200 image: /opt/torch/.venv): labwright's GPU
# facts and wiring from the real device nodes, the resolver for the real driver, and the ABI verifier against the
# real torch, with a CUDA extension built here (must pass and run on the GPU) and one carrying torch 2.9's
# c10::cuda::SetDevice(int) (must fail the way flash-attn 2.8.3+cu128torch2.9 failed under torch 2.11).
# Run from the repo root, with labwright's few dependencies importable (see README.md here). Installs two tiny
# packages into that torch environment: use a throwaway machine.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PY=$(python3 -c 'import sys; print(sys.executable)')
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD/src"
step() { echo; echo "### $*"; }
step host; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; cat /proc/driver/nvidia/version
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
step labwright GPU facts and passthrough wiring; python3 "$HERE/facts.py"
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader)
step "matrix resolve for driver $DRIVER"; python3 -m labwright matrix resolve --torch 2.11.0 --cuda 13.0 --python 3.12 --driver "$DRIVER"
step verify the torch environment, cold then cached
time python3 -m labwright stack verify --python "$PY" --no-import >/dev/null
python3 -m labwright stack verify --python "$PY"; echo "verify rc=$?"
time python3 -m labwright stack verify --python "$PY" >/dev/null
step a real CUDA extension: build, run on the GPU, verify
(cd "$HERE/ext_good" && TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" python3 -m pip install -q --no-build-isolation --no-deps .)
python3 -c "import torch, lw_good_cuda; x = torch.arange(8., device='cuda'); print(lw_good_cuda.add_one(x).tolist())"
python3 -m labwright stack verify --python "$PY"; echo "verify rc=$? (expect 0)"
step "an extension with torch 2.9's SetDevice(int): find_spec finds it, import fails, verify names it"
(cd "$HERE/ext_t29" && python3 -m pip install -q --no-build-isolation --no-deps .)
python3 -c "import importlib.util; print('find_spec:', importlib.util.find_spec('lw_t29_shape') is not None)"
python3 -c "import torch, lw_t29_shape" 2>&1 | tail -1
python3 -m labwright stack verify --python "$PY"; echo "verify rc=$? (expect 1)"
python3 -m pip uninstall -y -q lw_t29_shape lw_good_cuda
