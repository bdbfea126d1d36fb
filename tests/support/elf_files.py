"""Real ELF files that need a chosen glibc: compiled and linked here with g++ (tests/support/wheels.py's compiler).

A binary built on a newer Debian needs that release's ``GLIBC_x.y`` symbol versions (its ``.gnu.version_r``). To
get such a need on any build machine, a stand-in for one of glibc's libraries (``libdl.so.2``, which links
nothing else the program needs) is compiled first that defines one symbol at the version wanted (a linker version
script), and the binary is linked against it besides the real C library: the linker records the stand-in's
version as needed from ``libdl.so.2``, exactly as it records the real ones from ``libc.so.6``. (A stand-in
``libc.so.6`` itself would shadow the real one at link time.)
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from tests.support.wheels import compile_shared


def stand_in_libc(directory: Path, version: str) -> Path:
    """A ``libdl.so.2`` (in ``directory``) defining ``lw_glibc_probe`` at ``GLIBC_<version>``."""
    script = directory / "libc.map"
    directory.mkdir(parents=True, exist_ok=True)
    script.write_text(f"GLIBC_{version} {{ global: lw_glibc_probe; local: *; }};\n")
    return compile_shared(directory / "libdl.so.2", 'extern "C" int lw_glibc_probe() { return 0; }\n',
                          soname="libdl.so.2", extra=[f"-Wl,--version-script={script}"])


def elf_needing_glibc(output: Path, version: str, *, shared: bool = False) -> Path:
    """An executable (or, ``shared``, a library) whose newest glibc need is ``GLIBC_<version>`` (when the real C
    library's own needs of a one-line program are older, as on every supported Debian: 2.34 at most)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="labwright-elf-") as tmp:
        libc = stand_in_libc(Path(tmp) / "stand-in", version)
        source = Path(tmp) / "main.cpp"
        body = "int main() { return lw_glibc_probe(); }" if not shared else "int lw_use() { return lw_glibc_probe(); }"
        source.write_text(f'extern "C" int lw_glibc_probe();\n{body}\n')
        command = ["g++", "-O1", "-o", str(output), str(source), str(libc)]
        if shared:
            command[1:1] = ["-shared", "-fPIC"]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"g++ failed ({' '.join(command)}):\n{proc.stderr}")
    return output
