"""Models downloaded from a Hugging Face Hub into a guest's (shared) cache, verified, and marked complete atomically.

- ``spec``: what to download (repo, revision, allow/ignore patterns or one GGUF file, the link name), checked before
  anything runs; the same rules as huggingface_hub's own validators, so a bad name is refused here, not in the guest.
- ``fetch``: the runner that runs where the files land (the guest, or this machine): stdlib + huggingface_hub only,
  shipped to the guest as one file. It downloads with huggingface_hub, verifies every file against the Hub's checksums
  (sha256 of LFS files, the git blob id of the others), then points ``MODELS_DIR/NAME`` at the verified snapshot.

See docs/models.md.
"""
