"""Read what a shared object needs and what it exports: DT_NEEDED/SONAME/RUNPATH and its dynamic symbols.

pyelftools parses the ELF header, section headers and dynamic entries; the symbol table itself is unpacked with
``struct.iter_unpack`` straight from the mmapped section, because pyelftools builds a Python object per
symbol (about 40 µs each: 3 s for the 75,000 dynamic symbols of libtorch_cpu.so, ~0.1 s this way).
Only ``.dynsym`` is read: it is what the dynamic linker resolves against, and ``.symtab`` is stripped
from release wheels anyway.
"""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labwright.errors import BadInput

if TYPE_CHECKING:
    from elftools.elf.elffile import ELFFile

SHN_UNDEF = 0
STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE = 1, 2, 10
STT_SECTION, STT_FILE = 3, 4
STV_DEFAULT, STV_PROTECTED = 0, 3
ELF_MAGIC = b"\x7fELF"

# Mangled names that belong to torch: the c10, at, torch and caffe2 namespaces, including const/volatile/ref
# qualified members (_ZNK...), typeinfo/vtable/VTT/thread-local wrappers (_ZTI/_ZTV/_ZTS/_ZTT/_ZTH/_ZTW),
# guard variables (_ZGV) and function-local statics (_ZZ). Plus torch's C-level exports that extensions call:
# the Python binding helpers (THP*) and the AOTInductor shim (aoti_torch_*).
_TORCH_NAMESPACES = "3c10|2at|5torch|6caffe2"
TORCH_SYMBOL = re.compile(rf"^(?:_ZZ?(?:T[IVSTHW]|GV)?N[VKRO]*(?:{_TORCH_NAMESPACES})|THP|aoti_torch_)")
TORCH_LIBRARY = re.compile(r"(?a)^lib(?:c10|torch|caffe2|shm)[\w.-]*\.so(?:\.\d+)*$")
CUDA_RUNTIME = re.compile(r"(?a)^libcudart\.so\.(\d+)")
SHARED_OBJECT = re.compile(r"(?a)\.so(?:\.\d+)*$")
# std::string under the C++11 ABI is mangled std::__cxx11::basic_string, and functions returning one carry the
# abi tag B5cxx11; under the old ABI it is the abbreviation Ss or std::basic_string spelled out without __cxx11.
# Either one in an extension's undefined torch symbols tells which ABI it was compiled for, whatever its wheel's
# file name claims.
CXX11_MARKERS = ("St7__cxx1112basic_string", "B5cxx11")
# "Ss" alone also occurs inside identifiers, so only its parameter spellings count (const std::string&, ...).
OLD_ABI_STRING = re.compile(r"(?:RK|PK|R|P|O)Ss|St12basic_stringIcSt11char_traitsIcESaIcEE")


@dataclass
class DynamicInfo:
    """What the dynamic linker sees in one shared object."""

    needed: list[str] = field(default_factory=list)
    soname: str | None = None
    runpath: list[str] = field(default_factory=list)
    undefined: list[str] = field(default_factory=list)  # strong (non-weak) undefined symbols
    undefined_weak: list[str] = field(default_factory=list)
    exported: list[str] = field(default_factory=list)  # defined, global/weak/unique, default/protected visibility
    machine: str = ""

    @property
    def python_init(self) -> list[str]:
        """Module names this object can be imported as (it defines PyInit_<name>): a CPython extension module."""
        return [name[len("PyInit_"):] for name in self.exported if name.startswith("PyInit_")]

    @property
    def torch_undefined(self) -> list[str]:
        return [name for name in self.undefined if is_torch_symbol(name)]

    @property
    def needs_torch(self) -> bool:
        return any(TORCH_LIBRARY.match(lib) for lib in self.needed) or any(
            is_torch_symbol(name) for name in self.undefined)

    @property
    def cuda_runtime_major(self) -> int | None:
        for lib in self.needed:
            match = CUDA_RUNTIME.match(lib)
            if match:
                return int(match.group(1))
        return None


def is_torch_symbol(name: str) -> bool:
    return TORCH_SYMBOL.match(name) is not None


def cxx11_abi_hint(symbols: list[str]) -> bool | None:
    """True/False when the symbols show which std::string ABI they were compiled with; None when they don't say."""
    if any(marker in name for name in symbols for marker in CXX11_MARKERS):
        return True
    # Only look for the old-ABI spelling in C++ names: "Ss" is two letters that C identifiers contain often.
    for name in symbols:
        if name.startswith("_Z") and OLD_ABI_STRING.search(name) and "__cxx11" not in name:
            return False
    return None


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


class BrokenElf(BadInput):
    """A file that starts like an ELF object but cannot be one: truncated (what a half-finished install or a full
    disk leaves) or corrupt. The message names the file, what is wrong and the fix."""


def read_dynamic(path: Path, *, exports: bool = True) -> DynamicInfo:
    """Read one shared object's dynamic section and dynamic symbol table.

    ``exports=False`` keeps only the ``PyInit_`` exports (what tells an extension module from a library): the
    names of the other exported symbols are never decoded, which is most of the work for a big library that is
    not torch's (numpy's, the nvidia-* wheels' on a CUDA torch) when all the verifier asks is whether it needs torch.

    Raises BadInput for a file that is not a readable ELF shared object (the caller names it in its report):
    BrokenElf for a truncated or corrupt one. pyelftools reports a short file as a construct FieldError or
    StreamError, or not at all (a section table cut off reads as fewer bytes), so every section's extent is
    checked against the file's size first.
    """
    # pyelftools is imported here, not with the module: a run whose every file is cached reads no ELF at all,
    # and its import is a fifth of the verifier's own (labwright stack verify on a cached environment).
    from elftools.common.exceptions import ELFError
    from elftools.construct.core import ConstructError

    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            _check_extents(path, mapped)
            return _read(mapped, exports)
    except BrokenElf:
        raise
    except OSError as exc:
        raise BadInput(f"{path}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    except ValueError as exc:  # mmap of an empty file
        raise BrokenElf(f"{path}: an empty file, not an ELF shared object ({exc}): a half-finished install; "
                        "reinstall the wheel that owns it") from None
    except (ELFError, ConstructError, struct.error, IndexError, KeyError) as exc:
        raise BrokenElf(f"{path}: a corrupt ELF shared object ({type(exc).__name__}: {exc}): reinstall the wheel "
                        "that owns it") from None


def _check_extents(path: Path, mapped: mmap.mmap) -> None:
    """BrokenElf when the ELF header, the section header table or a section's bytes lie past the end of the file."""
    size = len(mapped)
    if mapped[:4] != ELF_MAGIC:
        raise BrokenElf(f"{path}: not an ELF shared object (starts with {mapped[:8]!r}): the loader cannot load it; "
                        "reinstall the wheel that owns it")
    from elftools.common.exceptions import ELFError
    from elftools.construct.core import ConstructError
    from elftools.elf.elffile import ELFFile

    fix = "truncated (a half-finished install or a full disk?): reinstall the wheel that owns it"
    if (size < 64 and mapped[4:5] == b"\x02") or size < 52:
        raise BrokenElf(f"{path}: {size} bytes, shorter than an ELF header: {fix}")
    try:
        elf = ELFFile(mapped)  # type: ignore[arg-type]
        table_end = elf["e_shoff"] + elf["e_shnum"] * elf["e_shentsize"]
        if table_end > size:
            raise BrokenElf(f"{path}: {size} bytes but its section table ends at byte {table_end}: {fix}")
        for index in range(elf.num_sections()):
            header = _section_header(elf, mapped, index)
            end = header["sh_offset"] + header["sh_size"]
            if header["sh_type"] != "SHT_NOBITS" and end > size:
                raise BrokenElf(f"{path}: {size} bytes but section {index} ends at byte {end}: {fix}")
    except (ELFError, ConstructError, struct.error) as exc:
        raise BrokenElf(f"{path}: {size} bytes, not a whole ELF object ({type(exc).__name__}: {exc}): {fix}") \
            from None


def _read(mapped: mmap.mmap, all_exports: bool = True) -> DynamicInfo:
    # pyelftools parses the ELF header, the section headers and the dynamic entries, through the mmap; no
    # section objects are built, because building them all (as iter_sections/get_section_by_name do) parses
    # the whole .gnu.hash table too: 0.8 s for libtorch_cpu.so, for nothing the verifier uses.
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(mapped)  # type: ignore[arg-type]  # mmap is a readable, seekable binary stream
    info = DynamicInfo(machine=str(elf["e_machine"]))
    headers = [_section_header(elf, mapped, i) for i in range(elf.num_sections())]
    for header in headers:
        if header["sh_type"] == "SHT_DYNAMIC":
            _read_dynamic_tags(elf, mapped, header, headers[header["sh_link"]], info)
    dynsym = next((h for h in headers if h["sh_type"] == "SHT_DYNSYM"), None)
    if dynsym is None:
        return info
    names = _section_bytes(mapped, headers[dynsym["sh_link"]])
    order = "<" if elf.little_endian else ">"
    size = 24 if elf.elfclass == 64 else 16
    table = _section_bytes(mapped, dynsym)
    table = table[:len(table) - len(table) % size]
    undefined, undefined_weak, exported = info.undefined, info.undefined_weak, info.exported
    find, starts = names.find, names.startswith
    for name_at, st_info, st_other, shndx in _iter_symbols(order, table, elf.elfclass):
        if not name_at:
            continue
        bind = st_info >> 4
        if shndx == SHN_UNDEF:
            name = names[name_at:find(b"\0", name_at)].decode("utf-8", "replace")
            (undefined_weak if bind == STB_WEAK else undefined).append(name)
        elif (bind in (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE) and (st_other & 3) in (STV_DEFAULT, STV_PROTECTED)
              and (st_info & 0xF) not in (STT_SECTION, STT_FILE) and (all_exports or starts(b"PyInit_", name_at))):
            exported.append(names[name_at:find(b"\0", name_at)].decode("utf-8", "replace"))
    return info


def _section_header(elf: ELFFile, mapped: mmap.mmap, index: int) -> Any:
    at = elf["e_shoff"] + index * elf["e_shentsize"]
    return elf.structs.Elf_Shdr.parse(mapped[at:at + elf["e_shentsize"]])


def _section_bytes(mapped: mmap.mmap, header: Any) -> bytes:
    if header["sh_type"] == "SHT_NOBITS":
        return b""
    return mapped[header["sh_offset"]:header["sh_offset"] + header["sh_size"]]


def _read_dynamic_tags(elf: ELFFile, mapped: mmap.mmap, header: Any, strtab: Any, info: DynamicInfo) -> None:
    strings = _section_bytes(mapped, strtab)
    data = _section_bytes(mapped, header)
    entry = elf.structs.Elf_Dyn.sizeof()

    def string(at: int) -> str:
        return strings[at:strings.find(b"\0", at)].decode("utf-8", "replace")

    for at in range(0, len(data) - entry + 1, entry):
        tag = elf.structs.Elf_Dyn.parse(data[at:at + entry])
        kind = tag["d_tag"]
        if kind == "DT_NULL":
            break
        if kind == "DT_NEEDED":
            info.needed.append(string(tag["d_val"]))
        elif kind == "DT_SONAME":
            info.soname = string(tag["d_val"])
        elif kind in ("DT_RUNPATH", "DT_RPATH"):
            info.runpath.extend(p for p in string(tag["d_val"]).split(":") if p)


def _iter_symbols(order: str, table: bytes, elfclass: int) -> Iterator[tuple[int, int, int, int]]:
    if elfclass == 64:  # st_name, st_info, st_other, st_shndx, st_value, st_size
        for name_at, st_info, st_other, shndx, _value, _size in struct.iter_unpack(order + "IBBHQQ", table):
            yield name_at, st_info, st_other, shndx
    else:  # st_name, st_value, st_size, st_info, st_other, st_shndx
        for name_at, _value, _size, st_info, st_other, shndx in struct.iter_unpack(order + "IIIBBH", table):
            yield name_at, st_info, st_other, shndx


def nested_name(symbol: str) -> str | None:
    """The mangled qualified name of a function symbol without its parameter list, or None when it isn't simple.

    ``_ZN3c104cuda9SetDeviceEi`` -> ``3c104cuda9SetDevice``: two symbols with the same nested name are the same
    function with a different signature, which is how torch minors usually break extensions (an int parameter
    that became int8_t, a bool added at the end). Only plain names are handled (no templates or substitutions);
    anything else returns None and simply gets no rename hint.
    """
    match = re.match(r"_ZN[VKRO]*", symbol)
    if not match:
        return None
    at, parts = match.end(), list[str]()
    while at < len(symbol):
        if symbol[at] == "E":
            return "".join(parts) if len(parts) > 1 else None
        digits = re.match(r"(?a)\d+", symbol[at:])
        if digits:
            length = int(digits.group())
            at += len(digits.group())
            parts.append(f"{length}{symbol[at:at + length]}")
            at += length
            continue
        ctor = re.match(r"[CD][0-5]", symbol[at:])
        if ctor:
            parts.append(ctor.group())
            at += 2
            continue
        return None
    return None


#: GLIBC_2.38, GLIBC_2.2.5: a glibc symbol version (GLIBC_PRIVATE and the like are no release).
GLIBC_VERSION = re.compile(r"(?a)^GLIBC_(\d+)\.(\d+)(?:\.\d+)?$")


def version_needs(path: Path) -> dict[str, list[str]]:
    """The symbol versions an ELF object needs, per library: its ``.gnu.version_r`` (SHT_GNU_verneed) section,
    ``{"libc.so.6": ["GLIBC_2.34", "GLIBC_2.38"], ...}``; {} for a file that is not ELF (a script) or has none
    (static). Raises BadInput when it cannot be read, BrokenElf when it is truncated or corrupt.

    Each Verneed entry (vn_version, vn_cnt, vn_file, vn_aux, vn_next) names a library and chains Vernaux entries
    (vna_hash, vna_flags, vna_other, vna_name, vna_next), 16 bytes each in both ELF classes; names are offsets
    into the section its sh_link names (.dynstr), as the System V gABI's GNU extension lays them out.
    """
    if not is_elf(path):
        return {}
    from elftools.common.exceptions import ELFError
    from elftools.construct.core import ConstructError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            _check_extents(path, mapped)
            elf = ELFFile(mapped)  # type: ignore[arg-type]
            headers = [_section_header(elf, mapped, i) for i in range(elf.num_sections())]
            order = "<" if elf.little_endian else ">"
            needs: dict[str, list[str]] = {}
            for header in headers:
                if header["sh_type"] == "SHT_GNU_verneed":
                    _read_verneed(order, _section_bytes(mapped, header),
                                  _section_bytes(mapped, headers[header["sh_link"]]), header["sh_info"], needs)
            return needs
    except BrokenElf:
        raise
    except OSError as exc:
        raise BadInput(f"{path}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    except (ELFError, ConstructError, struct.error, IndexError, KeyError) as exc:
        raise BrokenElf(f"{path}: a corrupt ELF object ({type(exc).__name__}: {exc})") from None


def _read_verneed(order: str, data: bytes, strings: bytes, count: int, needs: dict[str, list[str]]) -> None:
    def string(at: int) -> str:
        return strings[at:strings.find(b"\0", at)].decode("utf-8", "replace")

    at = 0
    for _ in range(count or len(data) // 16):  # sh_info: how many Verneed entries; bounded either way
        _version, aux_count, file_at, aux_at, next_at = struct.unpack_from(order + "HHIII", data, at)
        names = needs.setdefault(string(file_at), [])
        aux = at + aux_at
        for _ in range(aux_count):
            _hash, _flags, _other, name_at, aux_next = struct.unpack_from(order + "IHHII", data, aux)
            names.append(string(name_at))
            if not aux_next:
                break
            aux += aux_next
        if not next_at:
            break
        at += next_at


def glibc_needed(needs: dict[str, list[str]]) -> tuple[int, int] | None:
    """The newest ``GLIBC_x.y`` among version needs (version_needs), as (x, y); None when glibc is not needed."""
    found = [(int(m.group(1)), int(m.group(2))) for names in needs.values() for name in names
             if (m := GLIBC_VERSION.match(name))]
    return max(found) if found else None
