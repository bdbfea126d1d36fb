"""Kokoro-FastAPI TTS: the sentence-streaming source patch and the CPU/GPU choice (deploys/kokoro.py)."""
