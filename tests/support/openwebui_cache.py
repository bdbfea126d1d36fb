"""A cached lab container holding the dependencies of Open WebUI (and of the LiteLLM gateway the same test deploys
beside it), installed by pip from the test's wheelhouses and their hashed locks.

open-webui's lock (labwright.openwebui.wheelhouse: 243 wheels, 0.77 GB, 2.9 GB installed) costs ~85 s of the guest's
CPU to download, unpack and byte-compile; litellm[proxy]'s (101 wheels) a further part of a minute. Those installs of
everything BUT open-webui and litellm themselves are made once and kept as a STOPPED container of the test lab,
``lwtest-openwebui-<digest>``; the digest covers each lock's bytes (every file pinned by its sha256), the venvs'
paths and the lab image the template was made from, so a changed lock or image builds a new cache and removes the
old one. Each venv is made as the deploys make theirs (``labwright.deploys.common.venv_create``) and filled by the
same pip with the same source words (``pip_source``: the wheelhouse over plain http on the lab bridge, trusted by
name) and ``--require-hashes`` from the lock without the service's own pin, so pip byte-compiles as the deploys'
pip does. python3-venv, which the venvs are made with, is purged again when the image lacked it: the deploys still
install it themselves (``install_missing``), as on a bare guest.

A clone of the cache (a btrfs snapshot) still has neither open-webui nor litellm: each deploy's own install step
runs pip on its whole lock from its wheelhouse, which checks that the other pins are there and installs the
service's own wheel (its sha256 checked), so the tests still see that step change the guest. A new venv made from
nothing by a deploy's install step stays in the module too: the pipelines server's, from its hashed lock over http.

The build runs in a container of the test run (``user.labwright.test-owner``), renamed to the cache's name only once
it is complete and stopped: a build killed half way is an orphan that the next run's lab check removes. The cache
carries the lab's key, so ``lab down`` removes it with the lab.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from labwright import paths
from labwright.deploys.common import pip_source, venv_create
from labwright.errors import OperationFailed
from labwright.lab import lab as lab_ops
from labwright.locks import LOCK_NAME
from labwright.shell import quote
from labwright.testing.lab_fixture import OWNER_KEY, Lab
from support import guest_apt

CACHE_PREFIX = "lwtest-openwebui-"
CACHE_KEY = "user.labwright.openwebui-cache"
BUILDER_VERSION = "1"


@dataclass(frozen=True)
class Venv:
    """A service venv to fill: ``wheels`` (a wheelhouse with its requirements.lock), served to the guest at ``url``;
    ``path`` on the guest; ``package``: the service's own requirement, left for its deploy to install."""

    wheels: Path
    url: str
    path: str
    package: str


def dependencies_lock(lock: str, package: str) -> str:
    """The lock without ``package``'s own pin (``name==`` or ``name[extras]==``); every other line as it is."""
    own = re.compile(rf"^{re.escape(package)}(\[[^\]]*\])?==", re.IGNORECASE)
    lines = lock.splitlines(keepends=True)
    kept = [line for line in lines if not own.match(line)]
    if len(kept) != len(lines) - 1:
        raise OperationFailed(f"the lock of {package} has not exactly one pin of {package}")
    return "".join(kept)


def cache_name(lab: Lab, venvs: Sequence[Venv]) -> str:
    base = (lab.client.instance(lab.template).get("config") or {}).get(lab_ops.IMAGE_KEY, "")
    digest = hashlib.sha256(f"{BUILDER_VERSION}\n{base}\n".encode())
    for venv in venvs:
        digest.update(f"{venv.path}\n{venv.package}\n".encode())
        digest.update((venv.wheels / LOCK_NAME).read_bytes())
    return CACHE_PREFIX + digest.hexdigest()[:12]


def ensure_cache(lab: Lab, venvs: Sequence[Venv], log: Callable[[str], None] = print) -> tuple[str, bool]:
    """The stopped cache container's name and whether this call built it. One builder at a time on this machine
    (a file lock): a second session waits for the first one's build instead of building its own."""
    root = paths.cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / "openwebui-cache.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        name = cache_name(lab, venvs)
        for other in lab.client.iter_instance_names():
            if other.startswith(CACHE_PREFIX) and other != name:
                log(f"removing stale Open WebUI cache {other}")
                lab.remove(other)
        found = lab.client.instance_or_none(name)
        if found is not None and found["status"] == "Stopped" and (found.get("config") or {}).get(CACHE_KEY) == name:
            return name, False
        if found is not None:
            lab.remove(name)
        log(f"building the Open WebUI cache {name} (first run: the services' dependencies installed, minutes)")
        _build(lab, name, venvs)
        return name, True


def _build(lab: Lab, name: str, venvs: Sequence[Venv]) -> None:
    builder = lab.fresh("lwowuicache")
    try:
        steps = ["export DEBIAN_FRONTEND=noninteractive",
                 "had=$(dpkg -s python3-venv >/dev/null 2>&1 && echo yes || true)",
                 "{ [ -n \"$had\" ] || { " + guest_apt.command("update -q") + " >/dev/null && "
                 + guest_apt.command("install -y -q --no-install-recommends python3-venv") + " >/dev/null; }; }"]
        for number, venv in enumerate(venvs):
            lock = f"/root/dependencies-{number}.lock"
            text = dependencies_lock((venv.wheels / LOCK_NAME).read_text(), venv.package)
            lab.client.push_file(builder, lock, BytesIO(text.encode()), mode=0o644)
            source = pip_source(venv.url, "", urlsplit(venv.url).hostname or "")
            steps += [f"mkdir -p {quote(str(PurePosixPath(venv.path).parent))}", venv_create(venv.path),
                      f"{quote(venv.path + '/bin/pip')} install -q --disable-pip-version-check {source} "
                      f"--require-hashes -r {lock}", f"rm {lock}"]
        steps += ["{ [ -n \"$had\" ] || " + guest_apt.command("purge -y -q --autoremove python3-venv")
                  + " >/dev/null; }", guest_apt.command("clean") + " >/dev/null", "rm -rf /root/.cache/pip"]
        result = lab.client.exec(builder, ["sh", "-c", " && ".join(steps)])
        if result.exit_code != 0:
            raise OperationFailed(f"Open WebUI cache build failed ({result.exit_code}):\n"
                                  f"{result.stdout.decode()[-2000:]}{result.stderr.decode()[-3000:]}")
        lab.stop(builder)
        instance = lab.client.instance(builder)
        config = {k: v for k, v in (instance.get("config") or {}).items() if k != OWNER_KEY}
        lab.client.request("PUT", f"/1.0/instances/{builder}", {**_writable(instance), "config": {
            **config, CACHE_KEY: name}})
        lab.client.request("POST", f"/1.0/instances/{builder}", {"name": name})
    except BaseException:
        lab.remove(builder)
        raise


def _writable(instance: dict[str, object]) -> dict[str, object]:
    """The fields of an instance that a PUT takes (the rest is status)."""
    return {k: instance[k] for k in ("architecture", "config", "devices", "ephemeral", "profiles", "description")
            if k in instance}


def clone(lab: Lab, cache: str, prefix: str) -> str:
    """A new running container copied from the cache (a btrfs snapshot on the lab's pool), owned by this run."""
    return dataclasses.replace(lab, template=cache).fresh(prefix)
