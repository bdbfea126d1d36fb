"""The ABI verifier: does every compiled extension in an environment still link against the torch installed there?

For each .so that needs torch (links libc10/libtorch* or has undefined c10::/at::/torch:: symbols), every
undefined torch symbol is looked up in the exports of the torch libraries the dynamic linker would search for
it (the ones the extension links, their dependencies, and what ``import torch`` loads globally). Then the
module is really imported, with torch first, in a subprocess running the environment's Python.

This is the check ``importlib.util.find_spec`` cannot make: an extension built for torch 2.9 is "installed" under
torch 2.11 and fails only when imported ("undefined symbol: _ZN3c104cuda9SetDeviceEi").

Everything is cached by content hash (see abi_cache), so a second run over an unchanged environment reads no
ELF file and starts no Python. Verdicts, per module:

- ``ok``: every torch symbol resolves and the import works (or was skipped with --no-import);
- ``missing-symbols``: some torch symbols are not exported by this torch: rebuild or reinstall the wheel for it;
- ``import-error``: symbols resolve but the import fails (a missing CUDA library, a Python-level error);
- ``import-crashed``: the import killed or hung the interpreter.

A file that links NO torch library but whose torch symbols all exist in torch (cuda.core's ``_tensor_bridge``
binds ``aoti_torch_*`` this way, after its package loads ``torch._C`` with RTLD_GLOBAL) is "late-bound": not
an ABI break, so not missing symbols. It is imported last, after the torch libraries that export its symbols
are loaded RTLD_GLOBAL as its package does, and a warning says it depends on that. Seen on a real CUDA torch
(2.11.0+cu130, cuda-core 1.2.0), where a plain import of it fails with "undefined symbol".
"""

from __future__ import annotations

import bisect
import importlib.machinery
import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labwright.errors import BadInput
from labwright.matrix import abi_env
from labwright.matrix.abi_cache import AbiCache, key_of, recorded_hashes
from labwright.matrix.abi_env import Distribution, Environment, TorchInstall
from labwright.matrix.abi_import import Importer, ImportRequest, ProbeFailed, TorchImport
from labwright.matrix.demangle import demangle
from labwright.matrix.elfsyms import (
    BrokenElf,
    DynamicInfo,
    cxx11_abi_hint,
    is_elf,
    nested_name,
    read_dynamic,
)

SCHEMA = "labwright.stack-verify/1"
EXAMPLES = 3  # missing symbols shown per module in the table; --json lists them all
UNDEFINED_SYMBOL = re.compile(r"undefined symbol: (\S+)")


@dataclass
class MissingSymbol:
    mangled: str
    demangled: str
    torch_has_instead: list[str] = field(default_factory=list)  # same function, other signature (demangled)
    exported_by_unlinked: list[str] = field(default_factory=list)  # torch libs that export it but aren't loaded


@dataclass
class ModuleReport:
    module: str
    path: str
    kind: str  # "extension" (a CPython module: PyInit_) or "library" (a plain .so, loaded with ctypes)
    distribution: str | None
    version: str | None
    built_for_torch: str | None
    built_for_source: str | None
    cxx11_abi: bool | None
    cuda_runtime: int | None
    torch_symbols: int  # undefined torch symbols checked
    missing: list[MissingSymbol]
    late_bound: list[str] = field(default_factory=list)  # torch libs it binds to only once they are global
    import_checked: bool = False
    import_ok: bool | None = None
    import_error: str | None = None
    import_cached: bool = False
    static_cached: bool = False
    warnings: list[str] = field(default_factory=list)

    broken: str | None = None  # why the file itself is unusable (truncated, empty, not ELF); None when it reads

    @property
    def verdict(self) -> str:
        if self.broken:
            return "broken-file"
        if self.missing:
            return "missing-symbols"
        if self.import_checked and not self.import_ok:
            return "import-crashed" if (self.import_error or "").startswith("import crashed") else "import-error"
        return "ok"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        missing = data.pop("missing")
        data.update(verdict=self.verdict, missing={"count": len(missing), "symbols": missing})
        data["import"] = {key[len("import_"):]: data.pop(key) for key in list(data) if key.startswith("import_")}
        return data


@dataclass
class VerifyReport:
    python: str | None
    site_dirs: list[str]
    torch_root: str
    torch_version: str | None
    torch_libs: list[str]
    torch_cxx11_abi: bool | None
    torch_import: TorchImport | None
    modules: list[ModuleReport]
    skipped: list[dict[str, str]] = field(default_factory=list)  # .so files that could not be read: path, reason
    elapsed_s: float = 0.0
    hashed_bytes: int = 0  # bytes read to hash files this run: 0 when every hash came from the memo

    @property
    def ok(self) -> bool:
        torch_ok = self.torch_import is None or self.torch_import.ok
        return torch_ok and all(m.verdict == "ok" for m in self.modules)

    def to_json(self) -> dict[str, Any]:
        broken = sum(m.verdict != "ok" for m in self.modules)
        return {
            "schema": SCHEMA,
            "ok": self.ok,
            "python": self.python,
            "site_dirs": self.site_dirs,
            "torch": {"version": self.torch_version, "path": self.torch_root, "libs": self.torch_libs,
                      "cxx11_abi": self.torch_cxx11_abi,
                      "import": None if self.torch_import is None else asdict(self.torch_import)},
            "modules": [m.to_json() for m in self.modules],
            "skipped": self.skipped,
            "summary": {"checked": len(self.modules), "ok": len(self.modules) - broken, "broken": broken,
                        "cached": sum(m.static_cached and (m.import_cached or not m.import_checked)
                                      for m in self.modules)},
            "elapsed_s": round(self.elapsed_s, 3),
        }


class TorchSymbols:
    """The torch libraries' dynamic info and exports, read once per content hash and cached."""

    def __init__(self, torch: TorchInstall, cache: AbiCache):
        self.torch = torch
        self.cache = cache
        # a fresh pip install's RECORD already holds every library's sha256: hashing 0.5-4 GB is the cold cost
        # (read only when some library misses the stat memo, so a cached run does not parse RECORD)
        recorded = (recorded_hashes(torch.root, "lib/") if any(cache.memoised_sha256(p) is None
                                                               for p in torch.libs.values()) else {})
        self.shas = {name: cache.sha256(path, recorded.get(path)) for name, path in torch.libs.items()}
        self.fingerprint = key_of(*(f"{name}={sha}" for name, sha in sorted(self.shas.items())))
        self._info: dict[str, DynamicInfo] = {}
        self._exports: dict[str, frozenset[str]] = {}
        self._by_soname: dict[str, str] | None = None
        self._sorted: list[str] | None = None

    def info(self, name: str) -> DynamicInfo:
        if name not in self._info:
            cached = self.cache.load_as(f"elf/{self.shas[name]}.json", DynamicInfo)
            if cached is not None:
                self._info[name] = cached
            else:
                self._read(name)
        return self._info[name]

    def exports(self, name: str) -> frozenset[str]:
        if name not in self._exports:
            cached = self.cache.load_lines(f"exports/{self.shas[name]}.txt")
            if cached is None:
                self._read(name)
            else:
                self._exports[name] = frozenset(cached)
        return self._exports[name]

    def _read(self, name: str) -> None:
        # One pass over the file fills both caches: for libtorch_cpu.so the symbol table is most of the cost.
        full = read_dynamic(self.torch.libs[name])
        self._info[name] = store_elf_info(full, self.shas[name], self.cache)
        self._exports[name] = frozenset(full.exported)
        self.cache.store_lines(f"exports/{self.shas[name]}.txt", full.exported)

    def resolve(self, needed: Iterable[str]) -> list[str]:
        """torch libraries reachable from these DT_NEEDED names (by file name or SONAME), dependencies included."""
        if self._by_soname is None:
            self._by_soname = {name: name for name in self.torch.libs}
            for name in self.torch.libs:
                soname = self.info(name).soname
                if soname:
                    self._by_soname.setdefault(soname, name)
        reached: list[str] = []
        queue = [n for n in needed if n in self._by_soname]
        while queue:
            name = self._by_soname[queue.pop()]
            if name in reached:
                continue
            reached.append(name)
            queue.extend(n for n in self.info(name).needed if n in self._by_soname)
        return reached

    def scope_exports(self, libs: list[str]) -> set[str]:
        exported: set[str] = set()
        for name in libs:
            exported |= self.exports(name)
        return exported

    def cxx11_abi(self) -> bool | None:
        for name in ("libc10.so", *sorted(self.torch.libs)):
            if name in self.torch.libs:
                hint = cxx11_abi_hint([s for s in self.exports(name) if s.startswith("_ZN3c10")])
                if hint is not None:
                    return hint
        return None

    def cuda_runtime(self) -> int | None:
        """The CUDA runtime major torch's libraries link (None for a CPU build)."""
        for name in sorted(self.torch.libs):
            major = self.info(name).cuda_runtime_major
            if major is not None:
                return major
        return None

    def same_function(self, symbol: str) -> list[str]:
        """Exports that are the same qualified function as a missing symbol, with another signature."""
        qualified = nested_name(symbol)
        if qualified is None:
            return []
        if self._sorted is None:
            self._sorted = sorted(set().union(*(self.exports(name) for name in self.torch.libs)))
        found = []
        for prefix in (f"_ZN{qualified}E", f"_ZNK{qualified}E"):
            at = bisect.bisect_left(self._sorted, prefix)
            while at < len(self._sorted) and self._sorted[at].startswith(prefix):
                found.append(self._sorted[at])
                at += 1
        return found


def elf_info(path: Path, sha: str, cache: AbiCache) -> DynamicInfo:
    """DynamicInfo for one file, without its export list (big for torch's libraries, kept in exports/)."""
    cached: DynamicInfo | None = cache.load_as(f"elf/{sha}.json", DynamicInfo)
    if cached is not None:
        return cached
    return store_elf_info(read_dynamic(path, exports=False), sha, cache)


def store_elf_info(info: DynamicInfo, sha: str, cache: AbiCache) -> DynamicInfo:
    # Keep the PyInit_ exports (to tell an extension module from a plain library); drop the rest.
    slim = DynamicInfo(needed=info.needed, soname=info.soname, runpath=info.runpath, undefined=info.undefined,
                       undefined_weak=info.undefined_weak, machine=info.machine,
                       exported=[s for s in info.exported if s.startswith("PyInit_")])
    cache.store_json(f"elf/{sha}.json", asdict(slim))
    return slim


def verify(env: Environment, *, do_import: bool = True, cache: AbiCache | None = None,
           timeout: float = 60.0, importer: Importer | None = None, started: float | None = None) -> VerifyReport:
    """Check ``env``. ``importer``: a child already running ``env.python`` (the one that answered its probe),
    used for the imports instead of a new one, and closed in any case."""
    started = time.monotonic() if started is None else started
    cache = cache or AbiCache()
    if importer is not None and not (do_import and env.python):
        importer.close()
        importer = None
    if importer is None and do_import and env.python:
        importer = Importer(env.python, timeout=timeout)
    try:
        # Start the importer before hashing when anything is new: torch takes 1-2 s to import, which then
        # overlaps the walk, hashing and ELF reading below instead of following them.
        if importer and _anything_changed(cache, env.torch.libs.values()):
            importer.start()
        files = abi_env.shared_objects(env)
        if importer and any(cache.memoised_sha256(path) is None and not cache.known_unrelated(path)
                            for path, _ in files):
            importer.start()
        torch = TorchSymbols(env.torch, cache)
        owned = abi_env.owners(env.site_dirs)
        dists: dict[Path, Distribution] = {}
        reports: list[ModuleReport] = []
        shas: dict[int, str] = {}
        skipped: list[dict[str, str]] = []
        broken: list[ModuleReport] = []
        for path, site_dir in files:
            found = _torch_consumer(path, cache, skipped)
            if isinstance(found, str):
                dist_info = owned.get(str(path))
                broken.append(_broken_file(path, site_dir, found, abi_env.distribution(dist_info, dists)
                                           if dist_info else None))
                continue
            if found is None:
                continue
            sha, info = found
            dist_info = owned.get(str(path))
            if dist_info is not None and dist_info.name.split("-")[0].lower() == "torch":
                continue  # shipped in torch's own wheel (outside the torch package dir): part of what we check against
            dist = abi_env.distribution(dist_info, dists) if dist_info else None
            report = _static_check(path, site_dir, sha, info, dist, torch, cache)
            shas[len(reports)] = sha
            reports.append(report)
        torch_import = None
        if importer:
            torch_import = _import_all(importer, env, reports, shas, torch, cache)
        elif do_import:
            for report in reports:
                report.warnings.append("not imported: no Python found for this site-packages (pass --python)")
        _demangle_reports(reports)
        reports += broken
        cxx11 = torch.cxx11_abi() if any(r.cxx11_abi is not None for r in reports) else None
        cuda = torch.cuda_runtime() if any(r.cuda_runtime is not None for r in reports) else None
        for report in reports:
            if cuda is not None and report.cuda_runtime is not None and report.cuda_runtime != cuda:
                # libcudart.so.12 beside a cu13 torch loads a second CUDA runtime, if it is there at all.
                report.warnings.append(f"links CUDA runtime {report.cuda_runtime}, torch links CUDA {cuda}")
            if cxx11 is not None and report.cxx11_abi is not None and report.cxx11_abi != cxx11:
                report.warnings.append(f"compiled with _GLIBCXX_USE_CXX11_ABI={int(report.cxx11_abi)}, "
                                       f"torch with {int(cxx11)}")
    finally:
        if importer:
            importer.close()
        cache.flush()
    return VerifyReport(
        python=env.python, site_dirs=[str(d) for d in env.site_dirs], torch_root=str(env.torch.root),
        torch_version=env.torch.version, torch_libs=sorted(env.torch.libs), torch_cxx11_abi=cxx11,
        torch_import=torch_import, modules=sorted(reports, key=lambda r: r.module), skipped=skipped,
        elapsed_s=time.monotonic() - started, hashed_bytes=cache.hashed_bytes)


def _anything_changed(cache: AbiCache, paths: Iterable[Path]) -> bool:
    return any(cache.memoised_sha256(path) is None for path in paths)


def _torch_consumer(path: Path, cache: AbiCache,
                    skipped: list[dict[str, str]]) -> tuple[str, DynamicInfo] | str | None:
    """(content hash, ELF summary) of a file that needs torch; None for any other file; a reason (str) for a file
    that cannot be a shared object (truncated, empty, a non-ELF extension module): the loader would fail on it.

    The ELF is read before hashing: most .so files in an environment never link torch, and hashing them (GBs
    of nvidia-* libraries beside a CUDA torch) would cost more than the whole check.
    """
    sha = cache.memoised_sha256(path)
    if sha is not None:
        info = elf_info(path, sha, cache)
        return (sha, info) if info.needs_torch else None
    if cache.known_unrelated(path):
        return None
    if not is_elf(path):
        why = not_a_shared_object(path)
        if why is not None:
            return why
        cache.mark_unrelated(path)  # a linker script: nothing the loader maps
        return None
    try:
        full = read_dynamic(path, exports=False)  # what store_elf_info keeps: no other export is ever used
    except BrokenElf as exc:
        return str(exc)
    except BadInput as exc:
        skipped.append({"path": str(path), "reason": str(exc)})
        return None
    if not full.needs_torch:
        cache.mark_unrelated(path)
        return None
    sha = cache.sha256(path)
    return sha, store_elf_info(full, sha, cache)


#: How a GNU ld script (the only non-ELF file a .so name legitimately holds, e.g. libc.so) starts.
LINKER_SCRIPT = re.compile(rb"^\s*(?:/\*|INPUT\s*\(|GROUP\s*\(|OUTPUT_FORMAT\s*\(|SEARCH_DIR\s*\()")


def not_a_shared_object(path: Path) -> str | None:
    """Why a non-ELF file named .so is broken (empty, an extension module that is not ELF, binary junk), or None
    for a linker script."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError as exc:
        return f"{path}: cannot read it ({exc.strerror or type(exc).__name__})"
    fix = "reinstall the wheel that owns it"
    if not head:
        return f"{path}: an empty file where a shared object belongs (a half-finished install?): {fix}"
    if LINKER_SCRIPT.match(head) and path.name.split(".", 1)[-1] == "so":
        return None
    return f"{path}: not an ELF shared object (starts with {head[:8]!r}): the loader cannot load it; {fix}"


def _broken_file(path: Path, site_dir: Path, why: str, dist: Distribution | None) -> ModuleReport:
    """The report for a .so file that is no shared object at all: verdict broken-file, the reason as a warning."""
    name = path.name
    extension = any(name.endswith(suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES) and \
        name.count(".") > 1
    built_for, source = abi_env.built_for_torch(dist)
    return ModuleReport(module=abi_env.module_name(path, site_dir) if extension else name, path=str(path),
                        kind="extension" if extension else "library", distribution=dist.name if dist else None,
                        version=dist.version if dist else None, built_for_torch=built_for,
                        built_for_source=source, cxx11_abi=None, cuda_runtime=None, torch_symbols=0, missing=[],
                        broken=why, warnings=[why])


def _static_check(path: Path, site_dir: Path, sha: str, info: DynamicInfo, dist: Distribution | None,
                  torch: TorchSymbols, cache: AbiCache) -> ModuleReport:
    stem = abi_env.module_name(path, site_dir)
    kind = "extension" if stem.rpartition(".")[2] in info.python_init else "library"
    built_for, source = abi_env.built_for_torch(dist)
    torch_undefined = info.torch_undefined
    report = ModuleReport(
        module=stem if kind == "extension" else path.name, path=str(path), kind=kind,
        distribution=dist.name if dist else None, version=dist.version if dist else None,
        built_for_torch=built_for, built_for_source=source, cxx11_abi=cxx11_abi_hint(torch_undefined),
        cuda_runtime=info.cuda_runtime_major, torch_symbols=len(torch_undefined), missing=[])
    key = key_of(sha, torch.fingerprint)
    verdict: list[MissingSymbol] | None = cache.load_as(f"verdict/{key}.json", list[MissingSymbol])
    if verdict is not None:
        report.missing = verdict
        report.static_cached = True
    else:
        scope = torch.resolve([*info.needed, *torch.torch.global_libs])
        exported = torch.scope_exports(scope)
        for symbol in torch_undefined:
            if symbol in exported:
                continue
            unlinked = [name for name in sorted(torch.torch.libs) if name not in scope
                        and symbol in torch.exports(name)]
            report.missing.append(MissingSymbol(mangled=symbol, demangled=symbol,
                                                torch_has_instead=torch.same_function(symbol),
                                                exported_by_unlinked=unlinked))
        cache.store_json(f"verdict/{key}.json", [asdict(m) for m in report.missing])
    if (report.missing and all(m.exported_by_unlinked for m in report.missing)
            and not torch.resolve(info.needed)):
        report.late_bound = sorted({lib for m in report.missing for lib in m.exported_by_unlinked})
        report.warnings.append(
            f"links no torch library: its {len(report.missing)} torch symbol(s) bind only once "
            f"{', '.join(report.late_bound)} is loaded RTLD_GLOBAL (cuda.core does this itself; a package that "
            "does not fails to import it)")
        report.missing = []
    if built_for and not abi_env.same_minor(built_for, torch.torch.version):
        report.warnings.append(f"built for torch {built_for} ({source}), installed torch {torch.torch.version}")
    return report


def _import_all(importer: Importer, env: Environment, reports: list[ModuleReport], shas: dict[int, str],
                torch: TorchSymbols, cache: AbiCache) -> TorchImport | None:
    keys = {i: key_of(shas[i], torch.fingerprint, str(env.python)) for i in range(len(reports))}
    requests = []
    for i, report in enumerate(reports):
        report.import_checked = True
        # Only successes are cached: a failure may come from outside the hashed files (a CUDA library, an
        # environment variable), and a fixed environment must not keep reporting the old error.
        if cache.load_json(f"import/{keys[i]}.json") == {"ok": True}:
            report.import_ok, report.import_cached = True, True
        else:
            promote = [str(env.torch.libs[name]) for name in report.late_bound]
            requests.append(ImportRequest(id=i, module=report.module, path=report.path, kind=report.kind,
                                          promote=promote))
    if not requests:
        return None
    # Late-bound modules go last: once torch's libraries are global, every later import would see them too.
    outcomes = importer.run(sorted(requests, key=lambda r: bool(r.promote)))
    for request in requests:
        report = reports[request.id]
        outcome = outcomes.get(request.id)
        if outcome is None:  # torch itself did not import: nothing was tried
            report.import_checked = False
            continue
        report.import_ok, report.import_error = outcome.ok, outcome.error
        if outcome.ok:
            cache.store_json(f"import/{keys[request.id]}.json", {"ok": True})
    return importer.torch


def _demangle_reports(reports: list[ModuleReport]) -> None:
    names = {name for r in reports for m in r.missing for name in (m.mangled, *m.torch_has_instead)}
    for report in reports:
        match = UNDEFINED_SYMBOL.search(report.import_error or "")
        if match:
            names.add(match.group(1))
    if not names:
        return
    plain = demangle(sorted(names))
    for report in reports:
        for missing in report.missing:
            missing.demangled = plain[missing.mangled]
            missing.torch_has_instead = [plain[s] for s in missing.torch_has_instead]
        match = UNDEFINED_SYMBOL.search(report.import_error or "")
        if match and plain[match.group(1)] != match.group(1):
            # The dynamic linker names the first symbol it could not bind, mangled; say which function that is.
            report.import_error = f"{report.import_error} ({plain[match.group(1)]})"


def verify_python(python: str | None = None, site_packages: Path | None = None, **options: Any) -> VerifyReport:
    """Entry point for the CLI and other callers: pick the environment from exactly one of the two inputs."""
    if python and site_packages:
        raise BadInput("--python and --site-packages both given; pass one of them")
    if site_packages is not None:
        return verify(abi_env.environment_for_site_packages(site_packages), **options)
    if not python:
        raise BadInput("no environment given; pass --python /path/to/venv/bin/python or --site-packages DIR")
    started = time.monotonic()
    interpreter = abi_env.interpreter_for(python)
    # One child answers where the environment's packages are and then, if anything needs importing, imports
    # torch: a cold run starts torch's import one interpreter start-up sooner than with a separate probe.
    importer = Importer(str(interpreter), timeout=options.get("timeout", 60.0))
    try:
        probe = importer.probe()
        env = abi_env.environment_from_probe(python, interpreter, probe)
    except ProbeFailed as exc:
        raise abi_env.not_a_python(python, str(exc)) from None
    except BaseException:
        importer.close()
        raise
    return verify(env, importer=importer, started=started, **options)
