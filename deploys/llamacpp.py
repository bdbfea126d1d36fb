"""llama.cpp llama-server as a systemd service, with the seed's production flags as data; an Ollama drop-in.

    labwright build llamacpp                       # once per machine: the pinned llama-server, cached
    pyinfra -y @lxd/lw-node1 deploys/llamacpp.py --data llamacpp_model=/srv/models/qwen.gguf
    pyinfra -y @lxd/lw-node1 deploys/llamacpp.py --data llamacpp_model=/srv/models/q.gguf --data llamacpp_ctx_size=65536
    labwright verify llamacpp --hosts=@lxd/lw-node1 --llamacpp-model=/srv/models/qwen.gguf
    # several models, one router llama-server loading each on demand (each fit-checked first):
    pyinfra -y @lxd/lw-node1 deploys/llamacpp.py --data llamacpp_models=/srv/models/a.gguf,/srv/models/b.gguf

Host data: ``llamacpp_<key>`` for every key in templates/llamacpp/defaults.toml ([service] and [flags]),
``llamacpp_extra_args`` (a list appended to the command line), ``llamacpp_build`` (auto: the CUDA build for the
host's NVIDIA GPUs, the CPU build without; cpu; cuda; vulkan: AMD/Intel GPUs on a Debian 13 guest, built once with
``labwright build llamacpp --vulkan``, its device ``llamacpp_vulkan_device``), ``llamacpp_binary_src`` /
``llamacpp_binary_sha256`` (a binary of your own instead of the cached build) and ``llamacpp_ollama_<key>``
([ollama]; on an AMD/Intel guest Ollama's Vulkan backend is turned on too).
The server answers only with its API key, made on the guest (``llamacpp_api_key_file``, /etc/llama-server/api-key);
``llamacpp_open=true`` runs it without one on purpose; ``llamacpp_host=auto`` is 127.0.0.1 when only the LiteLLM
gateway on the same guest uses it (docs/security.md, "Every engine behind a key").
A GPU host's CUDA build is made once on the control machine: ``labwright build llamacpp --arch 8.6``.
See docs/llamacpp.md.

The binary is pushed from the control machine rather than built on each guest: one 5-minute build per machine
instead of one per guest, no compiler in the guests, and every guest runs byte-for-byte the same engine (its sha256
is checked on the guest before it replaces the installed one).

Everything is checked before anything changes (model present, port free or already ours, cache types the engine
accepts, a quantized V cache only with flash attention); each refusal is one line naming the data key.
"""

from labwright.deploys import engine_host
from labwright.deploys.llamacpp import deploy_llamacpp

if engine_host("llamacpp"):
    deploy_llamacpp()
