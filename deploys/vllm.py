"""vLLM in a guest, end to end: driver check, user, engine stack (vllm + its pinned torch), key, unit, health.

    pyinfra -y @lxd/llm1 deploys/vllm.py --data vllm_model=/srv/models/Qwen3-8B-AWQ
    pyinfra -y @lxd/llm1 deploys/vllm.py --data model_repo=Qwen/Qwen3-8B-AWQ
    pyinfra -y @lxd/llm1 deploys/vllm.py --data engine=auto --data model_repo=Qwen/Qwen3-8B-AWQ

Host data: ``stack`` (a stack of wheels_matrix/stacks.toml, default ``vllm``), ``vllm_<key>`` or a ``vllm`` dict for
every key of templates/vllm/defaults.toml, deploys/model.py's ``model_*`` keys to download the model first, and
``engine: auto`` to let the model's format pick the engine (labwright model plan says which). See docs/vllm.md.

Everything in the data, and everything that can be known about the host before a change (model directory, port,
driver, key file), is checked first; each refusal is one line naming the key, and nothing changes. A broken stack is
refused by the stack switch before its swap and leaves the running service as it was. A second run with the same
data changes nothing.
"""

from labwright.deploys import engine_host
from labwright.deploys.vllm import deploy_vllm

if engine_host("vllm"):
    deploy_vllm()
