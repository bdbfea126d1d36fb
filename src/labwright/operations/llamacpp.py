"""pyinfra operations behind labwright.deploys.llamacpp: the llama-server build that fits the host's GPUs.

The choice and the files are labwright.llamacpp.deploy_data's pure logic (``build_choice``, ``server_files``); the
deploy runs the same functions before anything changes, so a refusal there stops the run in one line; here they run
again on the facts of the moment.
"""

from __future__ import annotations

import posixpath
from dataclasses import replace
from pathlib import Path

from pyinfra import host
from pyinfra.api import FileUploadCommand, operation
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.files import Sha256File

from labwright.facts.llamacpp import GlibcVersion
from labwright.facts.nvidia import NvidiaGpus
from labwright.llamacpp.deploy_data import build_choice, glibc_needed, glibc_refusal, server_files
from labwright.shell import quote


def staged(dest: str) -> str:
    """Where a pushed file waits for its sha256 check, beside its target."""
    return posixpath.join(posixpath.dirname(dest), f".{posixpath.basename(dest)}.labwright-new")


@operation()
def server_binary(binary: str, build: str = "auto", binary_src: str | None = None, binary_sha256: str | None = None,
                  builds: str | None = None, release: str | None = None):
    """
    The llama-server for this host's GPUs, from the control machine's build cache.

    + binary: install path on the guest (a CUDA build's libraries go to ``../lib/llama-server`` beside it, the
      binary's RUNPATH)
    + build: ``auto`` (the CUDA build for the compute capabilities the NvidiaGpus fact reports; the CPU build on a
      host without NVIDIA GPUs), ``cpu`` or ``cuda``
    + binary_src / binary_sha256: a binary of the user's own instead (then the GPU facts do not matter)
    + builds: the llama.cpp version's cache directory (default ``~/.cache/labwright/llama/VERSION``)
    + release: a Debian codename: the CPU build made in that release's build box (``cpu-CODENAME`` in the cache,
      labwright.llamacpp.buildbox), which the deploy picks when this machine's build needs a newer glibc than the
      guest's

    Each file is pushed only when the guest's sha256 differs: staged beside its target, checked with
    ``sha256sum -c`` on the guest, then moved over the old one; a CUDA build that is not built yet fails with the
    command that builds it. Nothing is pushed when a file needs a newer glibc than the host's (the GlibcVersion
    fact against the highest ``GLIBC_x.y`` in each ELF's ``.gnu.version_r``): it would not start there.

    **Example:**

    .. code:: python

        server_binary(name="llama-server for this host's GPUs", binary="/usr/local/bin/llama-server")
    """
    data = {"llamacpp_build": build, "llamacpp_binary_src": binary_src, "llamacpp_binary_sha256": binary_sha256}
    gpus = host.get_fact(NvidiaGpus)
    try:
        choice = build_choice(data, gpus)
        if release and choice.kind == "cpu":
            choice = replace(choice, release=release)
        planned = server_files(choice, data, binary, Path(builds) if builds else None)
        # a build that needs a newer glibc than the guest's would not start there: refused before any push
        needed = glibc_needed(planned)
        too_old = glibc_refusal(choice, needed, host.get_fact(GlibcVersion), host.name) if needed else None
    except Exception as exc:  # DeployError / BadInput from the data checks: one line, as the deploy says it
        raise OperationError(str(exc)) from None
    if too_old:
        raise OperationError(too_old)
    pushed = 0
    for item in planned:
        if host.get_fact(Sha256File, path=item.dest) == item.sha256:
            continue
        stage, dest = quote(staged(item.dest)), quote(item.dest)
        directory = quote(posixpath.dirname(item.dest))
        mode = "755" if item.dest == binary else "644"
        yield f"mkdir -p {directory}"
        yield FileUploadCommand(item.src, staged(item.dest))
        yield (f"echo '{item.sha256}  {staged(item.dest)}' | sha256sum -c --quiet || {{ rm -f {stage}; "
               f"echo 'labwright: pushed {posixpath.basename(item.dest)} does not match sha256 {item.sha256}' >&2; "
               f"exit 1; }}; chown root:root {stage} && chmod {mode} {stage} && mv -f {stage} {dest}")
        pushed += 1
    if not pushed:
        host.noop(f"{binary} is the {choice.describe()} ({planned[0].sha256[:12]})")
