"""A lab guest's apt lists and downloaded .debs kept between test runs, so a deploy's real ``apt-get install`` of a
package the image lacks works from them instead of the network (one tar per use and lab image recipe).

The first run downloads (``apt-get update`` in the guest, the deploy's install) and keeps what apt fetched
(``save``); later runs within ``MAX_AGE_DAYS`` put it back into the fresh guest first (``restore``) and mark the lists
fresh, both as pyinfra's ``apt.update(cache_time=...)`` sees it (``STAMP``) and as labwright's ``install_missing``
does (list files changed within the hour: labwright.deploys.common), so neither refreshes them over the network.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from labwright.lxd.client import LxdClient
from support.guest_apt import while_apt_idle

PATHS = ("var/lib/apt/lists", "var/cache/apt/archives")
STAMP = "/var/lib/apt/periodic/update-success-stamp"  # what pyinfra's apt.update(cache_time=...) looks at
MAX_AGE_DAYS = 7


def cache_file(use: str) -> Path:
    """Where the tar for ``use`` (a directory name, e.g. ``tabbyapi-test``) is kept, one per lab image recipe."""
    from labwright.lab import image as lab_image
    from support.wheels import test_env_root

    name = "apt-" + lab_image.load_recipe().alias.replace("/", "-") + ".tar"
    return test_env_root().parent / use / name


def restore(client: LxdClient, guest: str, use: str) -> bool:
    """Put the kept lists and .debs into ``guest`` and mark the lists fresh; False when there is no recent cache."""
    cache = cache_file(use)
    if not cache.is_file() or time.time() - cache.stat().st_mtime > MAX_AGE_DAYS * 86400:
        return False
    with cache.open("rb") as handle:
        client.push_file(guest, "/tmp/apt-cache.tar", handle, mode=0o600)
    # under apt's locks: a fresh guest's apt-daily may be rewriting the same lists (support.guest_apt)
    result = client.exec(guest, ["sh", "-c", while_apt_idle(
        f"tar -C / -xf /tmp/apt-cache.tar && rm /tmp/apt-cache.tar && mkdir -p {os.path.dirname(STAMP)} && "
        f"touch {STAMP} && find /var/lib/apt/lists -maxdepth 1 -type f -exec touch {{}} +")])
    if result.exit_code != 0:
        raise AssertionError(f"restoring the apt cache in {guest} failed: {result.stderr.decode(errors='replace')}")
    return True


def save(client: LxdClient, guest: str, use: str) -> None:
    """Keep ``guest``'s apt lists and the .debs it downloaded, for the next run."""
    result = client.exec(guest, ["sh", "-c", while_apt_idle(
        "tar -C / --exclude=lock --exclude=partial -cf - " + " ".join(PATHS))])
    if result.exit_code == 0:
        cache = cache_file(use)
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f"{cache.name}.{os.getpid()}.part")  # one per writer: two workers may save at once
        partial.write_bytes(result.stdout)
        partial.replace(cache)
