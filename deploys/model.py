"""A Hugging Face model (a repo snapshot, or one GGUF file) downloaded into the guest, verified, linked by name.

    pyinfra -y @lxd/llm1 deploys/model.py --data model_repo=Qwen/Qwen3-0.6B \
        --data 'model_allow=["*.json","*.safetensors","tokenizer*"]'
    pyinfra -y @lxd/llm1 deploys/model.py --data model_repo=unsloth/Qwen3-0.6B-GGUF \
        --data model_file=Qwen3-0.6B-Q8_0.gguf --data model_name=qwen3-0.6b

Host data: ``model_repo`` (required), ``model_revision`` (branch, tag or commit; default main), ``model_allow`` /
``model_ignore`` (patterns) or ``model_file`` (one GGUF), ``model_name`` (default: the repo's name), ``model_dir``
(default /srv/models; put it on a mount to share the cache between guests), ``model_cache_dir``, ``model_endpoint``
(HF_ENDPOINT), ``model_venv``, ``model_find_links``; or the spec as one ``model`` table. See docs/models.md.

The model lands at MODEL_DIR/NAME (a link to the verified snapshot): point tabbyAPI at model_dir=MODEL_DIR,
model_name=NAME, or llama.cpp at MODEL_DIR/NAME/FILE.
"""

from labwright.deploys.model import deploy_model

deploy_model()
