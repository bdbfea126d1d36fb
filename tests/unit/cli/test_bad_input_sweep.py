"""The bad-input sweep: every command and every option of the typer app, walked (not listed by hand), fed classes
of bad input. Each case must end within a bound, with no traceback, exit 2 (the input is the cause; exit 1 where the
value is plausible and a later step failed), one stderr line that names the input, nothing on stdout, and nothing
written.

Classes, by what the parameter is (introspected from the typer app):
- a path read: a file of random bytes, a Latin-1 (not UTF-8) text file, an empty directory, a missing path, a
  named pipe nobody writes to (a read that blocks on it is a hang), an empty file, a well-formed document of the
  wrong shape (a JSON list, a YAML scalar), a loop of symbolic links;
- a path written (--out, --plot): a path under a regular file;
- an int/float: 0, -1, 10**12, "abc", "0x10", "\\x0b1", "1\\xa0" (and "nan", "inf", "-inf", "1e400" for floats);
- a host/guest/node name: "@lxd/$(id)", "a b", 300 characters, "", a non-UTF-8 byte;
- any other string: "a $(id)", 300 characters, "", "1000000000000", "-1" (these may be valid: exit 0 is allowed,
  the rest holds);
- an unknown option.

Each case runs in a forked child of a lean server process (support.cli_child.ForkServer: the groups are imported
there once, what a child imported in a command's body is imported there after it, for the next child, and the
packaged wheels matrix is parsed there once), in a sandbox: its own cwd, HOME,
LABWRIGHT_HOME, an LXD_DIR/INCUS_DIR with no socket and LXD_CONF with no remotes (commands that need a daemon fail
fast and never reach the real one), HTTP(S) proxies pointing at 127.0.0.1:9 (nothing listens: no registry is dialled).
Commands that change things get their dry-run flag; `--yes` is never given; stdin is /dev/null (a confirmation aborts).
Required parameters get a valid value (FILLERS) so that the bad value, not a missing argument, is what is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from support.cli_child import ForkServer, fork_main, import_modules
from support.cli_walk import leaf_commands

#: A case that takes longer than this hangs (the loaded CI machine included: most cases take well under a second).
CASE_TIMEOUT_S = 60.0

#: (command, case id) pairs that still fail, owned by another engineer's files, with what is wrong. EMPTY when done.
KNOWN_OWNERS_PENDING: dict[tuple[str, str], str] = {
}

#: Parameters that name a host, guest or node: odd strings there are bad input, never valid.
NAME_PARAMETERS = {"host", "guest", "node", "lead", "prevent_node", "remove"}
#: Parameters that are paths labwright writes (not reads).
OUTPUT_PARAMETERS = {"out", "plot"}
#: Parameters that turn a command into a dry run; one is always given where the command has it.
DRY_PARAMETERS = {"dry", "dry_run"}
#: Parameters never given (they would make a command act for real).
NEVER_GIVEN = {"yes", "create"}
#: Files that are meaningful for a path parameter (so not bad input), with why.
MEANINGFUL_FILES: dict[tuple[str, str], set[str]] = {
    # tabbyAPI reads an empty config.yml as all defaults (common/tabby_config.py _from_file: unwrap(None, {})):
    # n-gram drafting is added to it
    ("tabbyapi ngram", "config"): {"empty-file"},
    ("bench tts", "text"): {"json-list", "yaml-scalar"},  # any UTF-8 text is text to speak
    # a directory that is empty or not there yet is where a model goes (made when missing; --dry makes nothing)
    ("model fetch", "models"): {"empty-dir", "missing"},
    ("model fetch", "cache"): {"empty-dir", "missing"},
    ("wheelhouse requirements", "files"): {"empty-file"},  # no requirements of its own, beside the words given
}
#: Numbers that are meaningful for a parameter (so not bad input), with why.
MEANINGFUL_NUMBERS: dict[tuple[str, str], set[str]] = {
    ("matrix show", "limit"): {"1000000000000"},  # more rows than there are: all of them
    ("stack switch", "keep"): {"0", "1000000000000"},  # keep no older stack directory / keep them all
    ("probe ceiling", "lock_wait"): {"0"},  # refuse at once when another run holds the guest
    ("probe restore", "lock_wait"): {"0"},
    ("guest restore", "lock_wait"): {"0"},
    ("host upgrade", "lock_wait"): {"0"},
    ("model tiny", "seed"): {"0"},  # the default seed
}

RANDOM_BYTES = bytes((i * 7919 + 13) % 256 for i in range(4096)) + b"\x00\xff\xfe"
LLAMA_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
                "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 16,
                "intermediate_size": 8192, "max_position_embeddings": 8192, "vocab_size": 32000,
                "torch_dtype": "bfloat16"}


def _fixture_root(sandbox: Path) -> Path:
    root = sandbox / "fixtures"
    root.mkdir(exist_ok=True)
    return root


def _llama_config(sandbox: Path) -> str:
    path = _fixture_root(sandbox) / "config.json"
    path.write_text(json.dumps(LLAMA_CONFIG))
    return str(path)


def _tabbyapi_checkout(sandbox: Path) -> str:
    from labwright.tabbyapi.ngram import CONFIG, CONFIG_SAMPLE, MODEL_PY
    from support.tabbyapi_standin import CONFIG_CONFIG_SAMPLE, CONFIG_MODEL_PY

    root = _fixture_root(sandbox) / "tabbyapi"
    (root / MODEL_PY).parent.mkdir(parents=True, exist_ok=True)
    (root / MODEL_PY).write_text(CONFIG_MODEL_PY)
    (root / CONFIG_SAMPLE).write_text(CONFIG_CONFIG_SAMPLE)
    (root / CONFIG).write_text(CONFIG_CONFIG_SAMPLE)
    (root / "main.py").write_text("")
    return str(root)


def _kokoro_checkout(sandbox: Path) -> str:
    from support.kokoro_standin import write_standin_tree

    return str(write_standin_tree(_fixture_root(sandbox) / "kokoro", "default"))


def _bench_result(sandbox: Path) -> str:
    from labwright.bench.runner import SCHEMA, ContextResult

    summary = {"trials": 2, "ttft_s": 0.5, "total_s": 1.0, "prompt_tokens": 512, "decode_tokens": 64,
               "prefill_tps": 1000.0, "decode_tps": 30.0, "server_prefill_tps": None, "server_decode_tps": None}
    result = ContextResult(512, []).to_json() | {"cold": summary, "warm": summary}
    path = _fixture_root(sandbox) / "bench-a.json"
    path.write_text(json.dumps({"schema": SCHEMA, "label": "a", "results": [result]}))
    return str(path)


def _text(sandbox: Path) -> str:
    path = _fixture_root(sandbox) / "speech.txt"
    path.write_text("Hello there. This is a sentence.\n")
    return str(path)


def _listing(sandbox: Path) -> str:
    path = _fixture_root(sandbox) / "mine.txt"
    path.write_text("# source: me\nhttps://x.invalid/fla_core-0.6.0-py3-none-any.whl sha256=" + "0" * 64 + "\n")
    return str(path)


def _lxd_guest_inventory(sandbox: Path) -> str:
    path = _fixture_root(sandbox) / "guests.py"
    path.write_text('guests = [("@lxd/lw-sweep", {"guest": {"backend": "lxd"}})]\n')
    return str(path)


def _cluster_inventory(sandbox: Path) -> str:
    path = _fixture_root(sandbox) / "cluster.py"
    path.write_text('cluster = [("pve1", {"cluster_lxd": "lw-sweep-pve1"}), '
                    '("pve2", {"cluster_lxd": "lw-sweep-pve2"})]\n')
    return str(path)


def _bios_image(sandbox: Path) -> str:
    from support.bios_image import write_x99_image

    return str(write_x99_image(_fixture_root(sandbox) / "bios.rom"))


def _site_packages(sandbox: Path) -> str:
    path = _fixture_root(sandbox) / "site-packages"
    (path / "torch" / "lib").mkdir(parents=True, exist_ok=True)
    (path / "torch" / "__init__.py").write_text("")
    return str(path)


def _wheel(sandbox: Path) -> str:
    from support.wheels import write_wheel

    return str(write_wheel(_fixture_root(sandbox) / "wheels", "sweep_pkg", "1.0", {"sweep_pkg/__init__.py": b""},
                           tag="py3-none-any"))


def _gguf(sandbox: Path) -> str:
    from support.gguf_files import write_gguf

    meta = {"block_count": 2, "embedding_length": 64, "attention.head_count": 4, "attention.head_count_kv": 2,
            "context_length": 2048}
    return str(write_gguf(_fixture_root(sandbox) / "tiny.gguf", "llama", meta))


def _const(value: str) -> Callable[[Path], str]:
    return lambda sandbox: value


#: A valid value for each required parameter (and for optional ones whose default would stop the command first),
#: by command and parameter name. A command the sweep meets without one fails with the name to add.
FILLERS: dict[tuple[str, str], Callable[[Path], str]] = {
    ("matrix refresh", "listing"): _listing,
    ("matrix check", "torch"): _const("2.11.0"),
    ("matrix inspect", "wheels"): _wheel,
    ("stack switch", "to"): _const("A"),
    ("stack switch", "venv"): lambda sandbox: str(sandbox / "cwd" / "venv"),
    ("stack rollback", "venv"): lambda sandbox: str(sandbox / "cwd" / "venv"),
    ("stack show", "venv"): lambda sandbox: str(sandbox / "cwd" / "venv"),
    ("stack verify", "site_packages"): _site_packages,
    ("tabbyapi ngram", "source"): _tabbyapi_checkout,
    ("kv plan", "config"): _llama_config,
    ("kv fit", "vram_gb"): _const("24"),
    ("kv fit", "weights_gb"): _const("8"),
    ("bench llm", "url"): _const("http://127.0.0.1:9/v1"),
    ("probe ceiling", "engine"): _const("tabbyapi"),
    ("probe ceiling", "guest"): _const("lw-sweep"),
    ("probe restore", "guest"): _const("lw-sweep"),
    ("bench compare", "files"): _bench_result,
    ("bench tts", "url"): _const("http://127.0.0.1:9/v1"),
    ("bench tts", "text"): _text,
    ("cluster rejoin", "node"): _const("pve1"),
    ("cluster rejoin", "lead"): _const("127.0.0.1"),
    ("cluster rejoin", "inventory"): _cluster_inventory,
    ("cluster doctor", "inventory"): _cluster_inventory,
    ("cluster ghosts", "inventory"): _cluster_inventory,
    ("guest plan", "inventory"): _lxd_guest_inventory,
    ("guest apply", "inventory"): _lxd_guest_inventory,
    ("guest show", "inventory"): _lxd_guest_inventory,
    ("guest start", "inventory"): _lxd_guest_inventory,
    ("guest stop", "inventory"): _lxd_guest_inventory,
    ("guest destroy", "inventory"): _lxd_guest_inventory,
    ("bios backup", "host"): _const("@lxd/lw-sweep"),
    ("host upgrade", "node"): _const("localhost"),  # a name every host answers to (node_names)
    ("bios restore", "host"): _const("@lxd/lw-sweep"),
    ("bios restore", "image"): _bios_image,
    ("desktop check", "guest"): _const("lw-sweep"),
    ("kokoro patch", "source"): _kokoro_checkout,
    ("guest snapshot", "guest"): _const("@lxd/lw-sweep"),
    ("guest snapshots", "guest"): _const("@lxd/lw-sweep"),
    ("guest restore", "guest"): _const("@lxd/lw-sweep"),
    ("gpu check", "guest"): _const("lw-sweep"),
    ("gpu arch", "capability"): _const("8.6"),
    ("model fetch", "repo"): _const("Qwen/Qwen3-0.6B"),
    ("model plan", "model"): _gguf,
    ("model plan", "vram_gb"): _const("24"),
    ("model tiny", "out"): lambda sandbox: str(sandbox / "cwd" / "tiny.gguf"),
    ("wheelhouse litellm", "python"): _const("3.11.2"),
    ("wheelhouse openwebui", "python"): _const("3.11.2"),
    ("wheelhouse requirements", "python"): _const("3.11.2"),
    ("wheelhouse requirements", "out"): lambda sandbox: str(sandbox / "cwd" / "wheels"),
    ("wheelhouse requirements", "words"): _const("kokoro==0.9.4"),
    ("wheelhouse stack", "name"): _const("A"),
    ("wheelhouse stack", "out"): lambda sandbox: str(sandbox / "cwd" / "wheels"),
}


@dataclass
class Parameter:
    name: str
    flag: str | None  # the option's first long flag; None for an argument
    kind: str  # "path", "output", "int", "float", "name", "str", "bool"
    required: bool
    multiple: bool

    def give(self, value: str) -> list[str]:
        return [value] if self.flag is None else [self.flag, value]


@dataclass
class Command:
    path: str
    params: list[Parameter]
    takes_unknown_options: bool
    order: list[str] = field(default_factory=list)


def _kind(command: str, param: Any) -> str:
    annotation = param.type_descriptor.annotation
    args = getattr(annotation, "__args__", None)
    inner = args[0] if args and getattr(annotation, "__origin__", None) is list else annotation
    if inner is bool:
        return "bool"
    if inner is Path:
        return "output" if param.name in OUTPUT_PARAMETERS else "path"
    if inner is int:
        return "int"
    if inner is float:
        return "float"
    return "name" if param.name in NAME_PARAMETERS else "str"


def walk() -> list[Command]:
    """Every command of the app with its parameters, as typer built them."""
    found: list[Command] = []
    for path, command in leaf_commands():
        params = []
        for param in command.params:
            # help; and the hidden old spellings (a positional inventory): thin deprecated shims over the option
            if param.name == "help" or getattr(param, "hidden", False):
                continue
            long_flags = [o for o in param.opts if o.startswith("--")] if param.param_type_name == "option" else []
            flag = (long_flags or param.opts)[0] if param.param_type_name == "option" else None
            params.append(Parameter(param.name, flag, _kind(path, param), bool(param.required),
                                    bool(param.multiple or param.nargs != 1)))
        found.append(Command(path, params, bool(getattr(command, "ignore_unknown_options", False))))
    return found


@dataclass
class Case:
    command: str
    id: str
    strict: bool  # the value is never valid: exit 1/2 required (2 unless a later step failed)
    build: Callable[[Path], tuple[list[str], list[str]]]  # sandbox -> (argv, words one of which the error names)


def _argv(command: Command, sandbox: Path, bad: tuple[Parameter, str] | None) -> list[str]:
    """The command line: fillers for the parameters that need one, the dry-run flag, and the bad value in its
    parameter's place (arguments keep their order)."""
    argv = command.path.split()
    for param in command.params:
        if bad is not None and param is bad[0]:
            argv += param.give(bad[1])
            continue
        if param.name in NEVER_GIVEN:
            continue
        if param.name in DRY_PARAMETERS:
            argv.append(param.flag or "")
            continue
        filler = FILLERS.get((command.path, param.name))
        if filler is not None:
            argv += param.give(filler(sandbox))
        elif param.required:
            raise AssertionError(f"sweep: {command.path} needs a valid value for {param.flag or param.name}: "
                                 "add it to FILLERS")
    return argv


def _bad_values(command: Command, param: Parameter) -> list[tuple[str, bool, Callable[[Path], str]]]:
    """(case id, strict, value maker) for one parameter."""
    def file_of_random_bytes(sandbox: Path) -> str:
        path = sandbox / "cwd" / "random.bin"
        path.write_bytes(RANDOM_BYTES)
        return str(path)

    def latin1_text(sandbox: Path) -> str:
        path = sandbox / "cwd" / "latin1.txt"
        path.write_bytes("name = \"caf\xe9\"\nmodel: caf\xe9\n".encode("latin-1"))
        return str(path)

    def empty_directory(sandbox: Path) -> str:
        path = sandbox / "cwd" / "empty-dir"
        path.mkdir(exist_ok=True)
        return str(path)

    def named_pipe(sandbox: Path) -> str:
        path = sandbox / "cwd" / "pipe"
        if not path.exists():
            os.mkfifo(path)
        return str(path)

    def written(name: str, data: bytes) -> Callable[[Path], str]:
        def make(sandbox: Path) -> str:
            path = sandbox / "cwd" / name
            path.write_bytes(data)
            return str(path)
        return make

    def symlink_loop(sandbox: Path) -> str:
        first, second = sandbox / "cwd" / "loop-a", sandbox / "cwd" / "loop-b"
        if not first.is_symlink():
            first.symlink_to(second)
            second.symlink_to(first)
        return str(first)

    def under_a_file(sandbox: Path) -> str:
        return str(Path(file_of_random_bytes(sandbox)) / "sub" / "x")

    if param.kind == "path":
        meaningful_file = MEANINGFUL_FILES.get((command.path, param.name), set())
        files = [("random-bytes", True, file_of_random_bytes), ("latin1-text", True, latin1_text),
                 ("empty-dir", True, empty_directory), ("fifo-no-writer", True, named_pipe),
                 ("empty-file", True, written("empty", b"")), ("json-list", True, written("list.json", b"[1, 2]\n")),
                 ("yaml-scalar", True, written("scalar.yml", b"just words\n")), ("symlink-loop", True, symlink_loop),
                 ("missing", True, lambda sandbox: str(sandbox / "cwd" / "no-such-file"))]
        return [(case_id, strict and case_id not in meaningful_file, make) for case_id, strict, make in files]
    if param.kind == "output":
        return [("under-a-file", True, under_a_file)]
    if param.kind in ("int", "float"):
        # "\x0b1" and "1\xa0": white space int() and pydantic drop at the ends (read as 1 until 1a05899's sweep)
        values = ["0", "-1", "1000000000000", "abc", "0x10", "\x0b1", "1\xa0",
                  *(["nan", "inf", "-inf", "1e400"] if param.kind == "float" else [])]
        meaningful = MEANINGFUL_NUMBERS.get((command.path, param.name), set())
        return [(v, v not in meaningful, _const(v)) for v in values]
    if param.kind == "name":
        # "x\udcffy": the byte 0xff typed in a name, as Python decodes a non-UTF-8 argv (surrogateescape)
        return [(repr(v)[:24], True, _const(v)) for v in ("@lxd/$(id)", "a b", "n" * 300, "", "x\udcffy")]
    if param.kind == "str":
        # Strings that hold numbers (--contexts, --budget, --weights-gb) get huge and negative ones: a hang or a
        # terabyte allocation shows up here as a timeout.
        return [(repr(v)[:24], False, _const(v)) for v in ("a $(id)", "s" * 300, "", "1000000000000", "-1")]
    return []


def cases() -> list[Case]:
    out: list[Case] = []
    for command in walk():
        for param in command.params:
            if param.name in NEVER_GIVEN or param.name in DRY_PARAMETERS:
                continue
            for case_id, strict, make in _bad_values(command, param):
                def build(sandbox: Path, command: Command = command, param: Parameter = param,
                          make: Callable[[Path], str] = make) -> tuple[list[str], list[str]]:
                    value = make(sandbox)
                    argv = _argv(command, sandbox, (param, value))
                    words = [w for w in (param.flag, value[:60] if value else None, param.name.replace("_", "-"))
                             if w]
                    if not value and param.flag is None:
                        words.append("''")
                    return argv, words

                out.append(Case(command.path, f"{param.flag or param.name.upper()}={case_id}", strict, build))
        if not command.takes_unknown_options:
            def unknown(sandbox: Path, command: Command = command) -> tuple[list[str], list[str]]:
                return [*_argv(command, sandbox, None), "--no-such-option-x"], ["--no-such-option-x"]

            out.append(Case(command.path, "unknown-option", True, unknown))
    return out


def snapshot(root: Path) -> dict[str, str]:
    """Every file and directory under ``root``: its kind and, for files, a digest of its bytes."""
    seen: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            seen[os.path.relpath(os.path.join(dirpath, name), root)] = "dir"
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.isfile(path):  # a named pipe (the fifo case): its kind, never read
                seen[os.path.relpath(path, root)] = "not a regular file"
                continue
            try:
                digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            except OSError as exc:
                digest = f"unreadable {exc.errno}"
            seen[os.path.relpath(path, root)] = digest
    return seen


#: The TOML parse cache (labwright.textio.parse_toml_cached) under the sandbox's HOME: a cache of package data any
#: command that reads the matrix fills, never state a refusal could leave half-done; the directories made for it too.
PARSE_CACHE = "home/.cache/labwright/toml"


def written_paths(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What a run changed in its sandbox (two :func:`snapshot`s): not its own output files, not the parse cache."""
    return [path for path in set(after) | set(before) if before.get(path) != after.get(path)
            and path not in ("stdout", "stderr", "modules")
            and not (path == PARSE_CACHE or path.startswith(PARSE_CACHE + "/") or PARSE_CACHE.startswith(path + "/"))]


@dataclass
class Outcome:
    code: int | None
    stdout: str
    stderr: str
    seconds: float


def run_in_child(argv: list[str], sandbox: Path, server: ForkServer | None = None) -> Outcome:
    """``labwright ARGV`` in a child forked by ``server`` (None: by this process, so that it inherits what a test
    patched here, as test_cli_properties.py's guard on connections), confined to ``sandbox``; killed (with its
    process group) past CASE_TIMEOUT_S."""
    out_path, err_path, modules_path = sandbox / "stdout", sandbox / "stderr", sandbox / "modules"
    env = {
        "HOME": str(sandbox / "home"), "LABWRIGHT_HOME": str(sandbox / "home" / "labwright"),
        "XDG_CACHE_HOME": str(sandbox / "home" / ".cache"), "XDG_CONFIG_HOME": str(sandbox / "home" / ".config"),
        "LXD_DIR": str(sandbox / "no-lxd"), "INCUS_DIR": str(sandbox / "no-lxd"), "LXD_CONF": str(sandbox / "no-lxd"),
        "INCUS_CONF": str(sandbox / "no-lxd"), "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "no_proxy": "", "NO_PROXY": "",
        "PIP_NO_INDEX": "1", "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1",
    }
    unset: dict[str, str | None] = {"LABWRIGHT_DEBUG": None, "LABWRIGHT_MATRIX_DIR": None}
    started = time.monotonic()
    # What the command imported in its body (numpy, pydantic's schemas, ...) is imported after it where the child
    # was forked, so the next case's child has it already (support.cli_child.run_cli does the same): 318 cases
    # 55 -> 34 s of CPU.
    exit_code = (server.fork_main if server is not None else fork_main)(
        argv, stdin=os.devnull, stdout=out_path, stderr=err_path, timeout=CASE_TIMEOUT_S, cwd=sandbox / "cwd",
        env_changes=env | unset, imported=modules_path)
    seconds = time.monotonic() - started
    read = lambda p: p.read_text(errors="replace") if p.exists() else ""  # noqa: E731
    if server is None:
        import_modules(read(modules_path).split())
    return Outcome(exit_code, read(out_path), read(err_path), seconds)


ALL_CASES = cases()


def test_the_sweep_covers_every_command():
    commands = {case.command for case in ALL_CASES}
    assert len(commands) >= 30 and {"lab up", "guest plan", "desktop check", "stack switch", "bios backup"} <= commands
    assert len(ALL_CASES) >= 200


def test_known_owners_pending_are_real_cases():
    ids = {(case.command, case.id) for case in ALL_CASES}
    assert set(KNOWN_OWNERS_PENDING) <= ids, set(KNOWN_OWNERS_PENDING) - ids


def _check(case: Case, argv: list[str], words: list[str], outcome: Outcome, written: list[str]) -> list[str]:
    problems = []
    said = f"labwright {' '.join(argv)}\n  exit {outcome.code} in {outcome.seconds:.1f}s\n  stderr: {outcome.stderr!r}"
    if outcome.code is None:
        return [f"did not return within {CASE_TIMEOUT_S:.0f} s (a hang)\n{said}"]
    if "Traceback" in outcome.stderr or "internal error:" in outcome.stderr:
        problems.append("a traceback / internal error")
    if written:
        problems.append(f"wrote {sorted(written)[:5]}")
    if outcome.code == 0:
        if case.strict:
            problems.append("accepted (exit 0)")
    else:
        if outcome.code not in (1, 2):
            problems.append(f"exit {outcome.code}, not 1 or 2")
        elif case.strict and outcome.stdout.strip():
            problems.append("printed output before refusing the input")
        elif case.strict and outcome.code != 2:
            # exit 1 is a later step failing: fine only when the bad value got there legitimately (non-strict)
            problems.append("exit 1 for bad input (2 expected: the input is the cause)")
        lines = [line for line in outcome.stderr.splitlines() if line.strip()]
        # Bad input is refused before any step runs: one line. A plausible value may fail at a later step,
        # after that step's progress line: then one error line, the last.
        errors = [line for line in lines if line.startswith("labwright:")]
        if case.strict and len(lines) != 1:
            problems.append(f"{len(lines)} stderr lines, not 1")
        elif not case.strict and (len(errors) != 1 or lines[-1] != errors[0]):
            problems.append("not one error line, last")
        elif case.strict and not any(word.lower() in lines[0].lower() for word in words):
            problems.append(f"the error does not name the input (any of {words[:3]})")
    return [f"{'; '.join(problems)}\n{said}"] if problems else []


@pytest.fixture(scope="session")
def server() -> Iterator[ForkServer]:
    """The process the cases' children are forked from (support.cli_child.ForkServer: a lean one, ~20 ms of CPU a
    case less than forking this test process); one for the session, as xdist hands the cases out one at a time
    between other modules' tests."""
    forks = ForkServer()
    yield forks
    forks.close()


@pytest.mark.parametrize("case", ALL_CASES, ids=[f"{c.command}:{c.id}" for c in ALL_CASES])
def test_bad_input(case: Case, tmp_path: Path, server: ForkServer):
    for sub in ("cwd", "home", "fixtures"):
        (tmp_path / sub).mkdir()
    argv, words = case.build(tmp_path)
    before = snapshot(tmp_path)
    outcome = run_in_child(argv, tmp_path, server)
    after = snapshot(tmp_path)
    written = written_paths(before, after)
    problems = _check(case, argv, words, outcome, written)
    pending = KNOWN_OWNERS_PENDING.get((case.command, case.id))
    if pending is not None:
        assert problems, f"{case.command} {case.id} is listed as pending ({pending}) but passes: take it off the list"
        pytest.xfail(f"pending, owned elsewhere: {pending}")
    assert not problems, problems[0]
