"""The desktop's package list exists in the real archives of both supported releases.

The lab only has Debian 12 guests, so an Ubuntu 24.04 install is never run here; this reads the real
Ubuntu noble (and Debian bookworm) package indexes from the archives (package registries) and checks
that every name the deploy installs is there, so a package renamed or missing on one release fails
here instead of on an operator's guest. Indexes are cached under ~/.cache/labwright/apt-index.
"""

from __future__ import annotations

import lzma
import os
import urllib.request
from pathlib import Path

import pytest

from labwright.desktop.recipe import packages

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "labwright" / "apt-index"
ARCHIVES = {
    "ubuntu": ("http://archive.ubuntu.com/ubuntu", ["noble", "noble-updates"], ["main", "universe"]),
    "debian": ("http://deb.debian.org/debian", ["bookworm", "bookworm-updates"], ["main"]),
}


def package_names(distro: str) -> set[str]:
    base, suites, components = ARCHIVES[distro]
    names: set[str] = set()
    for suite in suites:
        for component in components:
            path = CACHE / distro / f"{suite}-{component}-amd64.xz"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                url = f"{base}/dists/{suite}/{component}/binary-amd64/Packages.xz"
                with urllib.request.urlopen(url, timeout=120) as response:
                    data = response.read()
                tmp = path.with_name(f"{path.name}.{os.getpid()}.part")
                tmp.write_bytes(data)
                tmp.replace(path)
            for line in lzma.decompress(path.read_bytes()).decode("utf-8", "replace").splitlines():
                if line.startswith("Package: "):
                    names.add(line.split(" ", 1)[1].strip())
    return names


@pytest.mark.parametrize(("distro", "firefox_source"), [("ubuntu", "mozilla"), ("debian", "mozilla"),
                                                        ("debian", "debian-esr")])
def test_every_desktop_package_is_in_the_release_archive(distro, firefox_source):
    names = package_names(distro)
    assert len(names) > 5000, f"{distro}: the index looks truncated ({len(names)} packages)"
    wanted = packages(distro, firefox_source)
    # With the mozilla source, `firefox` comes from packages.mozilla.org (pinned at 1000), not the release:
    # Ubuntu's own `firefox` is only the snap stub the seed warns about.
    from_release = [p for p in wanted if not (firefox_source == "mozilla" and p == "firefox")]
    missing = [p for p in from_release if p not in names]
    assert not missing, f"{distro} lacks {missing}"
