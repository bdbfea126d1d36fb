"""GPU awareness: the architecture table (compute capability -> CUDA builds with kernels for it) and
``labwright gpu check`` (GPU visible in a guest, userspace == host module, nodes and majors, the engine on it)."""
