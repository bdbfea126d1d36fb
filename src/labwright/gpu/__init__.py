"""GPU awareness, all of it here:

- :mod:`labwright.gpu.devices`: vendor-neutral device nodes (the mode and group a node gets in a guest) and the
  vendor registry (a second vendor is a new module, not a new branch in every caller);
- :mod:`labwright.gpu.arch`: the architecture table (compute capability -> CUDA builds with kernels for it);
- :mod:`labwright.gpu.check` and :mod:`labwright.gpu.guest`: ``labwright gpu check`` (GPU visible in a guest,
  userspace == host module, nodes and majors, the engine on it), through any ``labwright.hosts.Host``;
- :mod:`labwright.gpu.nvidia`: the NVIDIA vendor (driver, nvidia-smi, the host's nodes, the boot unit, the facts'
  readers, the host upgrade's facts).
"""
