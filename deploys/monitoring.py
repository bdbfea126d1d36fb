"""Prometheus and node-exporter (Debian's packages) scraping the inventory's engines, with GPU metrics and rules.

    pyinfra -y @lxd/lw-node1 deploys/llamacpp.py --data llamacpp_model=/srv/models/qwen.gguf
    pyinfra -y @lxd/lw-node1 deploys/monitoring.py --data llamacpp_model=/srv/models/qwen.gguf \
        --data monitoring_listen=127.0.0.1:9090
    pyinfra -y inventories/lab.py deploys/monitoring.py     # one host with monitoring_* data, engines elsewhere
    labwright verify monitoring --hosts=@lxd/lw-node1

The host whose data has a ``monitoring_*`` key runs Prometheus (``monitoring_<key>`` for every key in
templates/monitoring/defaults.toml); it scrapes every engine of the inventory that has a metrics endpoint
(llama-server ``--metrics`` with its key, vLLM, LiteLLM with ``monitoring_litellm=true``, and
``monitoring_targets``) and node-exporter on itself and on every engine host (GPU metrics per vendor through the
textfile collector: nvidia-smi or sysfs, no vendor daemon). Every target must answer before anything is installed.
See docs/monitoring.md.
"""

from labwright.deploys.monitoring import deploy_monitoring

deploy_monitoring()
