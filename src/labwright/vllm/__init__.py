"""vLLM (deploys/vllm.py): its host data, command line and unit."""
