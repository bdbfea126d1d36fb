"""labwright.deploys.llamacpp's host data as pure logic: flags, the command line, the unit, the Ollama drop-in.

Everything here reads a mapping (``host.data.dict()`` in the deploy, a plain dict in tests) and the control machine's
own files (the cached llama-server build), never a target host; each refusal is one line naming the data key
(``llamacpp_<key>``), raised before the deploy changes anything.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any

from pyinfra.api.exceptions import DeployError

from labwright import paths
from labwright.deploy_data import (
    FALSE,
    TRUE,
    DeployData,
    conflict_error,
    jinja,
    one_value_problem,
    refuse_unknown_keys,
    restart_policy,
)
from labwright.errors import BadInput
from labwright.gpu.arch import capabilities_of
from labwright.llamacpp import buildbox, cuda
from labwright.llamacpp import vulkan as vulkan_build
from labwright.llamacpp.build import (
    CUDA_LIB_DIR,
    NOT_BUILT,
    cache_dir,
    cached_build_problem,
    manifest_files,
    manifest_problem,
    read_sidecar,
    sha256_of,
    sidecar_path,
)
from labwright.matrix import elfsyms
from labwright.models.deploy_data import ModelSettings, engine_model
from labwright.schema import checks
from labwright.textio import ascii_digits, loads_json

if TYPE_CHECKING:
    from labwright.schema.model import Schema

TEMPLATES = paths.templates_dir("llamacpp")
DEFAULTS: dict[str, Any] = tomllib.loads((TEMPLATES / "defaults.toml").read_text())
JINJA = jinja(TEMPLATES)
OLLAMA_DROPIN = "/etc/systemd/system/ollama.service.d/50-labwright.conf"
KEYS = DeployData("llamacpp", DEFAULTS)
# llama-server's own key options (common/arg.cpp): a key given through extra_args would bypass the one made on the
# host, or put it on the command line.
KEY_OPTIONS = ("--api-key", "--api-key-file")
#: What the deploy sets from its own keys (the unit, the health check and the gateway read them): extra_args may not
#: set them again (llama-server takes the last of a repeated flag: --port 9 after --port 8001 leaves the health
#: check waiting on 8001).
OWN_OPTIONS = ("-m", "--model", "-a", "--alias", "--port", "--host", "-c", "--ctx-size", "-np", "--parallel",
               "-b", "--batch-size", "-ub", "--ubatch-size", "-ctk", "--cache-type-k", "-ctv", "--cache-type-v",
               "-fa", "--flash-attn", "--metrics", "--jinja")
#: llama.cpp keeps n_ctx, n_batch, n_ubatch and n_parallel in int32 (common/common.h common_params)
INT32 = 2**31 - 1
VERBOSITY_OPTIONS = ("-lv", "--verbosity", "--log-verbosity")




def guest_path(value: Any) -> str:
    """An absolute path on the guest, one spelling of it: no '..' part, no control character, no space at either end
    (sweep at 2b91fd1: 'm.gguf ' was reported as missing with the space invisible; '/x/../x/m.gguf' went into the
    unit as written)."""
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a path")
    if value != value.strip() or checks.control_character(value):
        raise ValueError(f"{value!r} has a space at an end or a control character; give the path alone")
    if not PurePosixPath(value).is_absolute():
        raise ValueError(f"{value!r} must be an absolute path on the guest")
    if ".." in value.split("/"):
        raise ValueError(f"{value!r} holds a '..' part; give the file's own path")
    return "/" + posixpath.normpath(value).lstrip("/")


def flash_attn_mode(value: Any) -> str:
    mode = ("on" if value else "off") if isinstance(value, bool) else str(value).strip().lower()
    modes = DEFAULTS["engine"]["flash_attn_modes"]
    if mode not in modes:
        raise ValueError(f"{mode!r} is not one of {', '.join(modes)}")
    return mode


def cache_type(value: Any) -> str:
    kind = str(value).strip().lower()
    kinds = DEFAULTS["engine"]["cache_types"]
    if kind not in kinds:
        raise ValueError(f"{kind!r} is not a cache type llama.cpp supports ({', '.join(kinds)})")
    return kind


def listen_or_auto(value: Any) -> str:
    return "auto" if str(value).strip() == "auto" else checks.listen_address(value)


BUILDS = ("auto", "cpu", "cuda", "vulkan")


def build_mode(value: Any) -> str:
    """``llamacpp_build``: one of BUILDS."""
    mode = str(value).strip().lower()
    if mode not in BUILDS:
        raise ValueError(f"{mode!r} is not one of {', '.join(BUILDS)}")
    return mode


def vulkan_device(value: Any) -> str:
    """``llamacpp_vulkan_device``: auto, or the index (0) or comma-separated indexes (0,1) of vulkaninfo's devices,
    as GGML_VK_VISIBLE_DEVICES takes them (ggml-vulkan.cpp, ggml_vk_instance_init: numbers split on commas)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not auto or a device index such as 0")
    text = str(value).strip().lower()
    if text == "auto":
        return text
    parts = [part.strip() for part in text.split(",")]
    if not all(ascii_digits(part) and len(part) <= 3 for part in parts):
        raise ValueError(f"{text!r} is not auto or vulkaninfo's device index (0) or indexes (0,1)")
    return ",".join(str(int(part)) for part in parts)


@cache
def data_schema() -> type[Schema]:
    """The ``llamacpp_*`` values of [service] and [flags] that are one value each, typed, in the deploy's order
    (built on first use: pydantic loads only with the data)."""
    from pydantic import BeforeValidator as Check

    from labwright.schema.fields import Flag
    from labwright.schema.model import Schema

    class LlamacppData(Schema):
        service: Annotated[str, Check(checks.service_user)]
        user: Annotated[str, Check(checks.service_user)]
        binary: Annotated[str, Check(checks.program_path)]
        alias: Annotated[str, Check(checks.or_empty(checks.line))]
        restart: Annotated[str, Check(restart_policy)]
        model: Annotated[str, Check(guest_path)]
        flash_attn: Annotated[str, Check(flash_attn_mode)]
        cache_type_k: Annotated[str, Check(cache_type)]
        cache_type_v: Annotated[str, Check(cache_type)]
        ctx_size: Annotated[int, Check(checks.whole(0, INT32))]
        parallel: Annotated[int, Check(checks.whole(1, 4096))]
        batch_size: Annotated[int, Check(checks.whole(1, INT32))]
        ubatch_size: Annotated[int, Check(checks.whole(1, INT32))]
        port: Annotated[int, Check(checks.whole(1, 65535))]
        host: Annotated[str, Check(listen_or_auto)]
        metrics: Flag
        jinja: Flag
        open: Flag
        health_timeout: Annotated[int, Check(checks.whole(1))]
        restart_sec: Annotated[int, Check(checks.whole(0))]
        build: Annotated[str, Check(build_mode)]
        vulkan_device: Annotated[str, Check(vulkan_device)]

    return LlamacppData


def typed_values(data: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`data_schema`'s keys read from ``data`` (over the defaults) and checked; the first bad one refused in
    one line naming ``llamacpp_KEY``."""
    keys = KEYS.over(data)
    typed = keys.parse(data_schema())
    if typed["cache_type_v"] not in DEFAULTS["engine"]["unquantized_cache_types"] and typed["flash_attn"] == "off":
        raise keys.fail("cache_type_v", f"{typed['cache_type_v']} is a quantized V cache, which llama.cpp only runs "
                        "with flash attention: set llamacpp_flash_attn=on (or auto), or llamacpp_cache_type_v=f16")
    if typed["ubatch_size"] > typed["batch_size"]:
        raise keys.fail("ubatch_size", f"{typed['ubatch_size']} is out of range (1..{typed['batch_size']}: at most "
                        "llamacpp_batch_size)")
    return typed


def check_data(data: Mapping[str, Any]) -> None:
    """Every check of the host data that needs no host (unknown keys, the typed keys, the flags, the Ollama drop-in's
    keys whether or not the host turns out to have Ollama): a deploy runs it before its first fact."""
    _data_values(data)  # the unknown keys first, then every typed key, the flags, extra args, key file, packages
    ollama_environment(data)


def flag_values(data: Mapping[str, Any]) -> dict[str, Any]:
    """The [flags] table with host overrides applied; false/""/None drop a flag, unknown keys need extra_args."""
    keys = KEYS.over(data)
    fail = keys.fail
    typed = typed_values(data)
    values = {key: typed[key] if key in typed else keys.get(key, "flags") for key in DEFAULTS["flags"]}
    kwargs = values["chat_template_kwargs"]
    if isinstance(kwargs, str) and kwargs.strip():
        try:
            kwargs = loads_json(kwargs)
        except json.JSONDecodeError:
            raise fail("chat_template_kwargs", f"{kwargs!r} is not a JSON object") from None
    if kwargs and not isinstance(kwargs, dict):
        raise fail("chat_template_kwargs", "must be a table/JSON object such as {\"enable_thinking\": false}")
    if kwargs:
        try:   # what reaches llama-server's command line is strict JSON: no NaN or Infinity
            json.dumps(kwargs, allow_nan=False)
        except (ValueError, TypeError) as exc:
            raise fail("chat_template_kwargs", f"is not plain JSON ({exc}); give numbers, strings, true/false") \
                from None
    values["chat_template_kwargs"] = kwargs
    return values


def command_line(binary: str, model: str, alias: str, flags: dict[str, Any], extra: list[str],
                 api_key_file: str = "") -> list[str]:
    """llama-server's argv: the model, the alias, ``--api-key-file`` (unless open), each flag as
    ``--key-with-dashes`` (tables as JSON), then extra."""
    args = [binary, "--model", model]
    if alias:
        args += ["--alias", alias]
    if api_key_file:
        args += ["--api-key-file", api_key_file]
    for key, value in flags.items():
        if value is None or value is False or value == "" or value == {}:
            continue
        option = "--" + key.replace("_", "-")
        if value is True:
            args.append(option)
        elif isinstance(value, dict | list):
            args += [option, json.dumps(value, separators=(",", ":"))]
        else:
            args += [option, str(value)]
    return args + extra


def systemd_quote(arg: str) -> str:
    """One ExecStart word: systemd expands % specifiers and $VARIABLES even inside quotes, so escape both."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if escaped and re.fullmatch(r"[A-Za-z0-9_./:=,+@-]+", escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


class HostBuildMissing(DeployError):
    """This machine's CPU build is wanted and not built yet: the deploy builds it (first_build_for says where)."""


def local_binary(data: Mapping[str, Any], builds: Path | None = None) -> tuple[str, str]:
    """The binary to push and its sha256, checked here so a corrupt cache never reaches a guest.

    The cached build (no llamacpp_binary_src) counts only as labwright.llamacpp.build.cached_build_problem says: a
    regular file whose sha256 is the one its build recorded beside it; a damaged entry is one line naming the cache
    and the command that builds it again, never a data key the user did not set. A binary the user gives
    (llamacpp_binary_src) is checked against llamacpp_binary_sha256, else against its sidecar (``NAME.sha256``,
    sha256sum's line) when there is one."""
    keys = KEYS.over(data)
    given_src = keys.get("binary_src")
    if given_src is not None and not isinstance(given_src, str | Path):
        raise keys.fail("binary_src", f"{given_src!r} is not a path; give the llama-server binary on this machine")
    src = Path(str(given_src or (builds or cache_dir()) / "llama-server")).expanduser()
    try:
        there = src.is_file()
    except OSError as exc:  # a name too long, a loop of links
        raise keys.fail("binary_src", f"{str(src)[:80]}: {exc.strerror}; give the llama-server binary on this "
                        "machine") from None
    given = data.get("llamacpp_binary_sha256")
    # --data parses an all-digit digest as a number (dropping leading zeros): spell it back as 64 digits.
    expected = f"{given:064d}" if isinstance(given, int) and not isinstance(given, bool) else str(given or "").lower()
    if given_src is None:
        problem = cached_build_problem(src)
        if problem == NOT_BUILT:
            raise HostBuildMissing(f"llamacpp_binary_src: {src} does not exist; build it with `labwright build "
                                   "llamacpp` or pass --data llamacpp_binary_src=PATH")
        if problem is not None and not (there and expected):  # a digest the user gave vouches for the file itself
            raise DeployError(f"the cached llama-server build {src} {problem}: build it again with `labwright "
                              f"build llamacpp` (or remove {src.parent}, and the deploy builds it) (nothing was "
                              "changed)")
    elif not there:
        raise DeployError(f"llamacpp_binary_src: {src} does not exist; build it with `labwright build llamacpp` "
                          "or pass --data llamacpp_binary_src=PATH")
    if expected and not re.fullmatch(r"[0-9a-f]{64}", expected):
        raise keys.fail("binary_sha256", f"{given!r} is not a sha256 (64 hex digits)")
    if not expected and given_src is not None:
        expected = user_sidecar_digest(src, keys)
    try:
        actual = sha256_of(src)
    except OSError as exc:
        raise DeployError(f"llamacpp_binary_src: {src}: {exc.strerror or type(exc).__name__}; give a readable "
                          "llama-server binary (nothing was changed)") from None
    if expected and actual != expected:
        raise keys.fail("binary_sha256", f"{src} has sha256 {actual}, expected {expected}")
    return str(src), actual


def user_sidecar_digest(src: Path, keys: DeployData) -> str:
    """The sha256 in the sidecar beside a binary the user gave (``NAME.sha256``: the digest, or sha256sum's line);
    "" when there is none; a sidecar that is there but holds no digest is one line naming it."""
    sidecar = sidecar_path(src)
    try:
        if not sidecar.is_file():
            return ""
        return read_sidecar(sidecar, sha256sum_line=True)
    except (OSError, BadInput) as exc:
        raise keys.fail("binary_src", f"{exc}; or pass --data llamacpp_binary_sha256=DIGEST (nothing was "
                        "changed)") from None


@dataclass(frozen=True)
class BuildChoice:
    """Which llama-server a host gets: ``cpu``, ``cuda`` (for ``archs``, CMAKE_CUDA_ARCHITECTURES entries),
    ``vulkan`` (asked for by name only) or ``given`` (``llamacpp_binary_src`` names one: the user's binary wins over
    the GPU facts). ``release``: a Debian codename when the build is the one made in that release's build box
    (labwright.llamacpp.buildbox), "" for this machine's own."""

    kind: str
    archs: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    release: str = ""

    def describe(self) -> str:
        if self.release:
            return f"{'CPU' if self.kind == 'cpu' else self.kind} build for Debian {self.release}"
        if self.kind == "cuda":
            return f"CUDA {cuda.DEFAULT.version} build for {' '.join(cuda.sm_name(a) for a in self.archs)}"
        if self.kind == "vulkan":
            return f"Vulkan build (Debian {vulkan_build.DEBIAN_MAJOR})"
        return "CPU build" if self.kind == "cpu" else "given binary"


@dataclass(frozen=True)
class ServerFile:
    """One file of the chosen build: where it is on the control machine, where it goes, its sha256."""

    src: str
    dest: str
    sha256: str


def build_choice(data: Mapping[str, Any], gpus: list[dict[str, Any]] | None) -> BuildChoice:
    """``llamacpp_build`` (auto, cpu, cuda) against the host's NvidiaGpus fact: auto is the CUDA build for the GPUs'
    compute capabilities where the host shows NVIDIA GPUs, the CPU build elsewhere. A GPU CUDA 13.0 cannot compile for,
    or cuda on a host without GPUs, is refused in one line naming the key."""
    keys = KEYS.over(data)
    given = data.get("llamacpp_build")
    problem = one_value_problem(given, "auto")
    if problem is not None:
        raise keys.fail("build", problem)
    mode = keys.checked("build", given or "auto", build_mode)
    if data.get("llamacpp_binary_src"):
        return BuildChoice("given")
    if mode == "vulkan":
        return BuildChoice("vulkan")
    capabilities = capabilities_of(gpus)
    if mode == "cpu" or (mode == "auto" and not capabilities):
        return BuildChoice("cpu")
    if not capabilities:
        raise keys.fail("build", "cuda, but nvidia-smi on this host shows no NVIDIA GPU with a compute capability; "
                        "pass the GPU through (guest gpu: nvidia) or use llamacpp_build=cpu (nothing was changed)")
    try:
        archs = cuda.architectures(capabilities, cuda.DEFAULT)
    except BadInput as exc:
        raise keys.fail("build", f"this host's GPUs: {exc} (nothing was changed)") from None
    return BuildChoice("cuda", tuple(archs), capabilities)


def guest_lib_dir(binary: str) -> str:
    """Where a CUDA build's libraries go on the guest: the binary's RUNPATH, ../lib/llama-server beside it."""
    return str(PurePosixPath(binary).parent.parent / PurePosixPath(CUDA_LIB_DIR).relative_to(".."))


def server_files(choice: BuildChoice, data: Mapping[str, Any], binary: str,
                 builds: Path | None = None) -> list[ServerFile]:
    """The files to install for ``choice``, from the control machine's cache (``builds``: the llama.cpp version's
    cache directory), each sha256 checked here against the build's record so a corrupt cache never reaches a guest.
    A CUDA build not built yet is refused with the command that builds it; so is a build for a guest's release
    (``choice.release``: made in that release's build box, labwright.llamacpp.buildbox)."""
    builds = builds or cache_dir()
    if choice.kind not in ("cuda", "vulkan") and not choice.release:
        src, sha256 = local_binary(data, builds)
        return [ServerFile(src, binary, sha256)]
    keys = KEYS.over(data)
    directory = builds / (buildbox.release_key(choice.release, choice.kind) if choice.release
                          else vulkan_build.BUILD_KEY if choice.kind == "vulkan"
                          else cuda.build_key(cuda.DEFAULT, choice.archs))
    manifest_path = directory / "manifest.json"
    if not manifest_path.is_file():
        if choice.release:
            raise keys.fail("build", f"{choice.kind}: the {choice.describe()} is not built on this machine yet "
                            f"({directory}); build it once in the lab's build box with `labwright build llamacpp "
                            f"--release {choice.release}` (nothing was changed)")
        if choice.kind == "vulkan":
            raise keys.fail("build", f"vulkan: the {choice.describe()} is not built on this machine yet "
                            f"({directory}); build it once with `labwright build llamacpp --vulkan` (~10 min on 2 "
                            "cores), or use llamacpp_build=cpu (nothing was changed)")
        wanted = " ".join(f"--arch {cap}" for cap in choice.capabilities)
        raise keys.fail("build", f"this host's GPUs need the {choice.describe()}, not built on this machine yet "
                        f"({directory}); build it once with `labwright build llamacpp {wanted}`, or use "
                        "llamacpp_build=cpu (nothing was changed)")
    try:
        recorded = manifest_files(directory)
    except BadInput as exc:
        raise keys.fail("build", f"{exc} (nothing was changed)") from None
    lib_dir = guest_lib_dir(binary)
    planned = []
    for rel, sha256 in recorded.items():
        local = directory / rel
        actual = hashlib.sha256(local.read_bytes()).hexdigest() if local.is_file() else "missing"
        if actual != sha256:
            raise keys.fail("build", f"{local} has sha256 {actual}, its build recorded {sha256}: the cache is "
                            f"damaged; remove {directory} and build it again (nothing was changed)")
        dest = binary if rel == "bin/llama-server" else f"{lib_dir}/{PurePosixPath(rel).name}"
        planned.append(ServerFile(str(local), dest, sha256))
    return planned


def vulkan_manifest(builds: Path | None = None) -> dict[str, Any]:
    """The cached Vulkan build's manifest.json ({} when not built)."""
    path = (builds or cache_dir()) / vulkan_build.BUILD_KEY / "manifest.json"
    if manifest_problem(path.parent) is not None:  # not built, or not whole: as not built
        return {}
    return loads_json(path.read_text())


def glibc_needed(files: Sequence[ServerFile]) -> tuple[tuple[int, int], str] | None:
    """The newest glibc any file to push needs and the file that needs it (its name), read from each ELF's
    version needs (``.gnu.version_r``: the highest ``GLIBC_x.y``, labwright.matrix.elfsyms); None when none needs
    glibc (a script, a static binary). The binary and the shared libraries shipped beside it are all read."""
    newest: tuple[tuple[int, int], str] | None = None
    for planned in files:
        try:
            need = elfsyms.glibc_needed(elfsyms.version_needs(Path(planned.src)))
        except BadInput as exc:
            raise DeployError(f"{exc}: the llama-server build is unusable; build it again (nothing was changed)") \
                from None
        if need is not None and (newest is None or need > newest[0]):
            newest = need, PurePosixPath(planned.dest).name
    return newest


def glibc_fits(needed: tuple[tuple[int, int], str] | None, guest_glibc: str | None) -> bool:
    """Whether a guest's glibc (``getconf GNU_LIBC_VERSION``: "glibc 2.36"; None: not glibc) runs files needing
    ``needed`` (glibc_needed's answer): glibc runs what was linked against it or an older one, never a newer one."""
    if needed is None:
        return True
    have = vulkan_build.glibc_tuple(guest_glibc or "")
    return bool(have) and have >= needed[0]


def release_build_for(choice: BuildChoice, needed: tuple[tuple[int, int], str] | None, guest_glibc: str | None,
                      guest_release: Mapping[str, Any] | None) -> str | None:
    """The Debian release (codename) whose build box should build llama-server for this guest, or None: push the
    files as they are (they fit, or no box can help and glibc_refusal says so).

    A box builds only when this machine's build would not start on the guest (it needs a newer glibc than the guest
    has, glibc_fits), not whenever the releases differ: glibc runs binaries linked against an older glibc, so one
    build from an older release serves every newer guest byte-for-byte the same, and a box build costs minutes
    (~6 on 2 idle cores, far more on a loaded machine) plus a container. And only the CPU build (buildbox.BOX_KINDS:
    the Vulkan build is Debian 13's only, CUDA's pip toolkit is not taken into a box, a given binary is the user's),
    for a Debian guest (``guest_release``: its os-release fields, pyinfra's LinuxDistribution ``release_meta``)
    whose release the lab has an image of (buildbox.release_recipes)."""
    if choice.kind not in buildbox.BOX_KINDS or choice.release or glibc_fits(needed, guest_glibc):
        return None
    codename = buildbox.codename_of(dict(guest_release or {}))
    return codename if codename in buildbox.release_recipes() else None


def host_build_missing(choice: BuildChoice, builds: Path | None = None) -> bool:
    """This machine's own CPU build is the one wanted and it is not built yet (nothing given, nothing cached)."""
    return choice.kind == "cpu" and not choice.release and \
        cached_build_problem((builds or cache_dir()) / "llama-server") == NOT_BUILT


def first_build_for(choice: BuildChoice, controller_glibc: str | None, guest_glibc: str | None,
                    guest_release: Mapping[str, Any] | None) -> str | None:
    """Where the first CPU build goes when none is cached (host_build_missing): the guest's Debian release
    (its codename: built in that release's box) when this machine's glibc (``controller_glibc``, "glibc 2.41") is
    newer than the guest's, else None (built here, as ``labwright build llamacpp`` does).

    A build here links this machine's glibc at most, so it always fits a guest with the same or a newer one; with
    an older one it may not (a Debian 13 controller's build needs GLIBC_2.38, a Debian 12 guest has 2.36), and
    building here first only to find that out cost a cold Debian 13 run a second build (docs/fresh-check.md). The
    same rule as release_build_for, with this machine's glibc standing in for the build not yet made."""
    mine = vulkan_build.glibc_tuple(controller_glibc or "")
    if len(mine) != 2:
        return None
    return release_build_for(choice, ((mine[0], mine[1]), "this machine's glibc"), guest_glibc, guest_release)


def glibc_refusal(choice: BuildChoice, needed: tuple[tuple[int, int], str] | None, guest_glibc: str | None,
                  host_name: str, release: str = "") -> str | None:
    """One line when a guest's glibc (``getconf GNU_LIBC_VERSION``: "glibc 2.36"; None: not glibc) is older than
    the files to push need (``needed``: glibc_needed's answer): the binary would not even start there
    (``GLIBC_2.38' not found``), and the health check would wait its whole timeout for nothing. Every build is
    checked (CPU, CUDA, Vulkan, a given binary): one built on a newer Debian than the guest's links that release's
    glibc. ``release``: the guest's Debian codename when the lab can build for it (release_build_for) but no lab
    daemon is there to make the box (a guest not reached through @lxd/@incus): the fix names the command that
    builds it here. A build made in a release's box (``choice.release``) that still does not fit names its cache."""
    if glibc_fits(needed, guest_glibc) or needed is None:
        return None
    (major, minor), name = needed
    have = vulkan_build.glibc_tuple(guest_glibc or "")
    shown = f"glibc {guest_glibc.split()[-1]}" if guest_glibc else "no glibc"
    older = f"of the guest's release (glibc {have[0]}.{have[1]} or older)" if len(have) == 2 else "for the guest"
    head = (f"{name} ({choice.describe()}) needs glibc {major}.{minor} (GLIBC_{major}.{minor}, read from its ELF), "
            f"{host_name} has {shown}: it would not start there")
    newer = "give the guest a newer image (lab image data/lab-image-trixie.toml, or upgrade it)"
    if choice.kind == "given":
        return f"llamacpp_binary_src: {head}; give a llama-server built on a machine {older}, or {newer} " \
            "(nothing was changed)"
    if choice.release:
        return (f"llamacpp_build: {choice.kind}: {head}; the build box of Debian {choice.release} is not the guest's "
                f"release: remove {buildbox.release_cache_dir(choice.release)} and re-run (nothing was changed)")
    if release:
        return (f"llamacpp_build: {choice.kind}: {head}; build it for the guest's release in the lab's build box "
                f"with `labwright build llamacpp --release {release}` on this machine (a guest reached through "
                "@lxd/@incus gets it built by the deploy itself), or give the guest a newer image (nothing was "
                "changed)")
    if choice.kind == "vulkan":
        return (f"llamacpp_build: vulkan: {head}; make the guest Debian {vulkan_build.DEBIAN_MAJOR} (lab image "
                "data/lab-image-trixie.toml, or upgrade it), or use llamacpp_build=cpu (nothing was changed)")
    return (f"llamacpp_build: {choice.kind}: {head}; build and deploy it from a machine {older} (`labwright "
            f"build llamacpp` there), or {newer} (nothing was changed)")


def unit_environment(choice: BuildChoice, device: str) -> dict[str, str]:
    """The unit's Environment=: GGML_VK_VISIBLE_DEVICES for a Vulkan build whose device is chosen
    (``llamacpp_vulkan_device``); nothing otherwise, so llama.cpp picks its GPU itself and skips CPU devices."""
    if choice.kind == "vulkan" and device != "auto":
        return {"GGML_VK_VISIBLE_DEVICES": device}
    return {}


@dataclass(frozen=True)
class LlamacppSettings:
    """Everything labwright.deploys.llamacpp needs before looking at the host, checked."""

    service: str
    user: str
    binary: str
    model: str
    alias: str
    flags: dict[str, Any]
    extra: list[str]
    health_timeout: int
    restart: str
    restart_sec: int
    runtime_packages: list[str]
    binary_src: str
    binary_sha256: str
    build: BuildChoice = BuildChoice("cpu")
    files: tuple[ServerFile, ...] = ()
    api_key_file: str = DEFAULTS["service"]["api_key_file"]
    open: bool = False
    environment: tuple[tuple[str, str], ...] = ()

    @property
    def key_file(self) -> str:
        """The key file llama-server reads (``--api-key-file``), "" for an open engine."""
        return "" if self.open else self.api_key_file

    @property
    def exec_start(self) -> str:
        return " ".join(systemd_quote(word) for word in command_line(self.binary, self.model, self.alias, self.flags,
                                                                     self.extra, self.key_file))

    def render_unit(self) -> str:
        return JINJA.get_template("llama-server.service.j2").render(
            model=self.model, user=self.user, exec_start=self.exec_start, restart=self.restart,
            restart_sec=self.restart_sec, environment=dict(self.environment))

    @property
    def health_url(self) -> str:
        """Where the host itself reaches the server (loopback when it listens on every address)."""
        listen = str(self.flags["host"])
        return f"http://{'127.0.0.1' if listen in ('0.0.0.0', '::', '') else listen}:{self.flags['port']}"

    @property
    def model_ids(self) -> list[str]:
        """What /v1/models may call the model: the alias, else llama-server's default (the path or its file name)."""
        return [self.alias] if self.alias else [self.model, PurePosixPath(self.model).name]

    @property
    def binary_stage(self) -> str:
        """Where the pushed binary waits for its sha256 check, beside the installed one."""
        binary = PurePosixPath(self.binary)
        return str(binary.with_name(f".{binary.name}.labwright-new"))


def data_keys() -> set[str]:
    """Every ``llamacpp_<key>`` the deploy reads: [service] and [flags], ``ollama_<key>`` of [ollama], the binary,
    ``models`` and ``fit_overhead_gb`` (several models, router mode: labwright.llamacpp.router)."""
    return ({*DEFAULTS["service"], *DEFAULTS["flags"], "extra_args", "binary_src", "binary_sha256", "build", "models",
             "fit_overhead_gb"}
            | {f"ollama_{key}" for key in DEFAULTS["ollama"]})


def _data_values(data: Mapping[str, Any], gateway_only: bool = False) -> dict[str, Any]:
    """Every value of the host data that needs no host and no build, checked in the deploy's order (the first bad
    key is the one reported): :func:`check_data` runs it before the deploy's first fact, :func:`settings_from`
    builds on it."""
    refuse_unknown_keys(data, "llamacpp", data_keys(), "templates/llamacpp/defaults.toml")
    keys = KEYS.over(data)
    fail, get = keys.fail, keys.get
    typed = typed_values(data)
    service, user, binary, model = typed["service"], typed["user"], typed["binary"], typed["model"]
    alias = typed["alias"]
    flags = flag_values(data)
    clash = conflict_error(data, {"llamacpp_port": flags["port"]})
    if clash is not None:
        raise DeployError(clash)
    if flags["host"] == "auto":
        flags["host"] = "127.0.0.1" if gateway_only else "0.0.0.0"
    extra = get("extra_args") or []
    if isinstance(extra, str):
        extra = shlex.split(extra)
    if not all(isinstance(word, str) for word in extra):
        raise fail("extra_args", "must be a list of command-line words")
    for word in extra:
        if checks.control_character(word):
            raise fail("extra_args", f"{word[:60]!r} holds a control character; give one word per item")
        if word.split("=", 1)[0] in OWN_OPTIONS:
            raise fail("extra_args", f"{word.split('=', 1)[0]} is set by the deploy's own keys (llamacpp_port, "
                       "llamacpp_ctx_size ...); set that key instead")
        if word.split("=", 1)[0] in KEY_OPTIONS:
            raise fail("extra_args", f"{word.split('=', 1)[0]}: the API key is made on the host and passed as "
                       "--api-key-file by labwright (a key on the command line is readable by every user in ps); "
                       "drop it (llamacpp_open=true runs without a key on purpose)")
    # a file in a directory of the service's own: never /etc/shadow, / ... (labwright.schema.checks.key_file)
    api_key_file = keys.checked("api_key_file", get("api_key_file"), checks.key_file)
    open_engine, health_timeout, restart_sec = typed["open"], typed["health_timeout"], typed["restart_sec"]
    packages = keys.checked("runtime_packages", get("runtime_packages"), checks.debian_packages)
    return {"service": service, "user": user, "binary": binary, "model": model, "alias": alias, "flags": flags,
            "extra": list(extra), "api_key_file": api_key_file, "open": open_engine, "health_timeout": health_timeout,
            "restart": typed["restart"], "restart_sec": restart_sec, "packages": list(packages),
            "vulkan_device": typed["vulkan_device"]}


def settings_from(data: Mapping[str, Any], gpus: list[dict[str, Any]] | None = None,
                  gateway_only: bool = False, release: str = "", pending: bool = False) -> LlamacppSettings:
    """Read and check the host data (names, paths, flags, extra args, the local build for the host's GPUs: the
    NvidiaGpus fact, None for none), in the deploy's order. ``gateway_only``: only the gateway on this guest uses
    the engine (labwright.engine_keys.gateway_only), so ``host = "auto"`` is 127.0.0.1; else 0.0.0.0.
    ``release``: the CPU build is the one made in that Debian release's build box (first_build_for). ``pending``:
    this machine's first CPU build is still to be made (HostBuildMissing): everything else is checked, with no files
    yet, so the deploy can ask the host its questions before it spends minutes on a build."""
    v = _data_values(data, gateway_only)
    extra, packages, binary = v["extra"], v["packages"], v["binary"]
    choice = build_choice(data, gpus)
    if release and choice.kind in buildbox.BOX_KINDS:
        choice = replace(choice, release=release)
    if v["vulkan_device"] != "auto" and choice.kind != "vulkan":
        raise KEYS.fail("vulkan_device", f"{v['vulkan_device']}: only the Vulkan build reads it; set "
                        "llamacpp_build=vulkan, or drop llamacpp_vulkan_device")
    try:
        files = server_files(choice, data, binary)
    except HostBuildMissing:
        if not pending:
            raise
        files = [ServerFile("", binary, "")]
    if choice.kind == "vulkan":  # the loader and Mesa's drivers (radv, anv, lavapipe) beside OpenMP's runtime
        packages = [*packages, *(p for p in vulkan_build.RUNTIME_PACKAGES if p not in packages)]
        # The pinned llama-server logs its Vulkan device ("using device Vulkan0 (...)") and "offloaded N/M layers"
        # only at verbosity 4 (common/arg.cpp --log-verbosity: "4: trace (more info)"; its default 3 says neither),
        # and `labwright gpu check` reads both from the journal: 4 unless extra_args sets its own.
        if not any(word.split("=", 1)[0] in VERBOSITY_OPTIONS for word in extra):
            extra = [*extra, "--log-verbosity", "4"]
    return LlamacppSettings(
        service=v["service"], user=v["user"], binary=binary, model=v["model"], alias=v["alias"], flags=v["flags"],
        extra=list(extra), health_timeout=v["health_timeout"], restart=v["restart"], restart_sec=v["restart_sec"],
        runtime_packages=list(packages), binary_src=files[0].src, binary_sha256=files[0].sha256, build=choice,
        files=tuple(files), api_key_file=v["api_key_file"], open=v["open"],
        environment=tuple(unit_environment(choice, v["vulkan_device"]).items()))


def ollama_mode(data: Mapping[str, Any]) -> str:
    """``llamacpp_ollama_override``: auto, or one of the true/false spellings."""
    given = data.get("llamacpp_ollama_override", DEFAULTS["ollama"]["override"])
    problem = one_value_problem(given, "auto")
    if problem is not None:
        raise KEYS.fail("ollama_override", problem)
    mode = str(given).strip().lower()
    if mode not in ("auto", *TRUE, *FALSE):
        raise KEYS.fail("ollama_override", f"{mode!r} is not auto, true or false")
    return mode


def ollama_environment(data: Mapping[str, Any], vulkan: bool = False) -> dict[str, str]:
    """The Ollama drop-in's environment: the same KV policy as llama-server (flash attention, cache type). ``vulkan``
    (an AMD/Intel host: /dev/dri render nodes): its Vulkan backend on, and the Vulkan device when one is chosen
    (``llamacpp_vulkan_device``).

    Ollama's envconfig/config.go: ``EnableVulkan = Bool("OLLAMA_VULKAN")`` at v0.12.11 (line 208, off unless set:
    "Enable experimental Vulkan support", line 317), ``BoolWithDefault("OLLAMA_VULKAN")`` at v0.32.15 (line 234, on
    by default: discover/runner.go line 108 asks ``EnableVulkan(true)``), so ``OLLAMA_VULKAN=1`` turns it on in
    both; ``VkVisibleDevices = String("GGML_VK_VISIBLE_DEVICES")`` (v0.32.15 line 254) passes the device to its
    llama.cpp runner."""
    keys = KEYS.over(data)

    def ollama_data(key: str) -> Any:
        value = data.get(f"llamacpp_ollama_{key}")
        return DEFAULTS["ollama"][key] if value is None else value

    kv_type = str(ollama_data("kv_cache_type")).strip().lower()
    if kv_type not in DEFAULTS["ollama"]["kv_cache_types"]:
        kinds = ", ".join(DEFAULTS["ollama"]["kv_cache_types"])
        raise keys.fail("ollama_kv_cache_type", f"{kv_type!r} is not one of {kinds}")
    flash_attention = keys.bool_of("ollama_flash_attention", ollama_data("flash_attention"))
    if kv_type != "f16" and not flash_attention:
        raise keys.fail("ollama_kv_cache_type", f"{kv_type} needs llamacpp_ollama_flash_attention=true (Ollama "
                        "ignores a quantized KV cache without flash attention)")
    env = {
        "OLLAMA_FLASH_ATTENTION": "1" if flash_attention else "0",
        "OLLAMA_KV_CACHE_TYPE": kv_type,
        "OLLAMA_KEEP_ALIVE": str(ollama_data("keep_alive")),
        "OLLAMA_CONTEXT_LENGTH": str(keys.int_of("ollama_context_length", ollama_data("context_length"), 0)),
    }
    if any(re.search(r'["\\\n%$]', value) for value in env.values()):
        raise keys.fail("ollama_keep_alive", "values must not contain quotes, backslashes, %, $ or newlines")
    if vulkan:
        env["OLLAMA_VULKAN"] = "1"
        device = keys.checked("vulkan_device", keys.get("vulkan_device"), vulkan_device)
        if device != "auto":
            env["GGML_VK_VISIBLE_DEVICES"] = device
    return env


def render_ollama_dropin(env: Mapping[str, str], groups: Sequence[str] = ()) -> str:
    """The drop-in; ``groups``: SupplementaryGroups= for the GPU's nodes (video and the render nodes' group), so
    Ollama's own user opens an AMD/Intel GPU's /dev/dri nodes."""
    return JINJA.get_template("ollama-override.conf.j2").render(env=env, groups=list(groups))


def downloaded_model(data: Mapping[str, Any]) -> tuple[dict[str, Any], ModelSettings | None]:
    """The host data with ``llamacpp_model`` pointing at the GGUF that deploys/model.py's keys name (``model_repo`` +
    ``model_file``, or a ``model`` table), and that download's settings; the data as given and None when no model is
    named. ``llamacpp_model`` naming another file as well is refused (BadInput, one line): one of the two would be
    ignored."""
    planned = engine_model(data, "llama.cpp", gguf=True)
    if planned is None:
        return dict(data), None
    given = data.get("llamacpp_model")
    if given is not None and str(given).strip() != planned.path:
        raise BadInput(f"llamacpp_model: {given!r} and model_repo {planned.spec.repo} both name the model: drop "
                       f"llamacpp_model (the download is served from {planned.path}) or the model_* keys")
    return {**data, "llamacpp_model": planned.path}, planned
