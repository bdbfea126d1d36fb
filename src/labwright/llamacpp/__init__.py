"""llama.cpp's llama-server for the lab: the pinned CPU build (build.py), a tiny generated GGUF (tiny_model.py)."""
