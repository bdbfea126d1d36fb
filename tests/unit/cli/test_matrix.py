"""`labwright matrix` as a user runs it: exit codes, JSON shape, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labwright.matrix.load import load_matrix
from labwright.paths import packaged_matrix_dir
from support.cli_child import run_cli

FA_29 = ("https://github.com/mjun0812/flash-attention-prebuild-wheels/releases/download/v0.9.0/"
         "flash_attn-2.8.3+cu128torch2.9-cp312-cp312-linux_x86_64.whl")


@pytest.fixture(scope="module", autouse=True)
def _packaged_matrix_parsed():
    """The packaged matrix parsed here once (load_matrix caches it per directory, and no test here rewrites it): each
    command's child (support.cli_child) inherits it instead of parsing it again."""
    load_matrix(packaged_matrix_dir())


def run(cli_env, *args, cwd=None):
    return run_cli(["matrix", *args], env=cli_env, cwd=cwd)


def test_resolve_json_is_exactly_the_documented_object(cli_env):
    proc = run(cli_env, "resolve", "--torch", "2.11.0", "--cuda", "13.0", "--python", "3.12", "--driver", "580.65",
               "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert list(data) == ["ok", "wheels", "absent", "errors"] and data["ok"] is True
    flash = next(w for w in data["wheels"] if w["name"] == "flash-attn")
    assert flash["version"] == "2.8.3+cu130torch2.11"
    assert data["absent"][0]["name"] == "causal-conv1d"


def test_resolve_refusal_exits_1_with_the_reason(cli_env):
    proc = run(cli_env, "resolve", "--torch", "2.11.0", "--cuda", "13.0", "--driver", "570.86", "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["ok"] is False and data["errors"][0].startswith("driver 570.86 is too old for CUDA 13.0")
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("labwright: error: stack refused: driver 570.86")


def test_resolve_human_output_is_a_table(cli_env):
    proc = run(cli_env, "resolve", "--torch", "2.11.0", "--cuda", "13.0")
    assert proc.returncode == 0, proc.stderr
    assert "2.8.3+cu130torch2.11" in proc.stdout and "deliberately absent" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["resolve", "--torch", "banana"], "labwright: error: --torch 'banana' is not a torch version: give one like"),
        (["resolve", "--torch", "2.11.0", "--cuda", "x"], "labwright: error: --cuda 'x' is not a CUDA version"),
        (["resolve"], "labwright: error: --torch is missing"),
        (["resolve", "--stack", "E"], "labwright: error: stack 'E' is unknown"),
        (["check", "--torch", "banana", FA_29], "labwright: error: --torch 'banana' is not a torch version"),
        (["check", "--torch", "2.11.0"], "labwright: error: nothing to check"),
        # sweep at 2b91fd1: an argument that is no pin was skipped and the check passed with nothing checked
        (["check", "--torch", "2.11.0", "garbage"], "labwright: error: argument 1 'garbage' is not a pinned wheel"),
        (["check", "--torch", "2.11.0", "flash-attn==2.8.3+cu130torch2.11", "numpy"],
         "labwright: error: argument 2 'numpy' is not a pinned wheel"),
        (["check", "--torch", "2.11.0", "-r", "/nonexistent/req.txt"],
         "labwright: error: /nonexistent/req.txt: no such file or directory (expected a requirements file (-r))"),
        (["check", "--torch", "2.11.0", "-r", "/dev/zero"],
         "labwright: error: /dev/zero is not a regular file (expected a requirements file (-r))"),
        (["show", "--limit", "0"], "labwright: error: --limit 0: give a number of wheels >= 1"),
        (["refresh", "--from", json.__file__, "--kind", "pip-index"],
         f"labwright: error: --from {json.__file__}: no <a href=...whl> links found"),
        (["refresh", "--from", json.__file__, "--base-url", "not a url"],
         "labwright: error: --base-url 'not a url': not an http(s) URL"),
        (["resolve", "--stack", "A", "--torch", "2.9.0"], "labwright: error: --stack A with --torch: a named stack "
                                                          "fixes those"),
        (["resolve", "--stack", "A", "--python", "3.13", "--pin", "exllamav3==0.0.37"],
         "labwright: error: --stack A with --python, --pin: a named stack fixes those"),
        (["show", "--stack", "A", "--component", "torch"], "labwright: error: --stack A with --component: show one"),
        (["show", "--component", "flash_attn", "--limit", "-1"], "labwright: error: --limit -1: give a number"),
        (["show", "--component", "xformers"], "labwright: error: --component 'xformers' is unknown"),
        (["show", "--torch", "x"], "labwright: error: --torch filter one component's wheels: add --component"),
        (["show", "--python", "abc", "--platform", "nosuch"],
         "labwright: error: --python, --platform filter one component's wheels"),
    ],
)
def test_bad_input_is_one_line_exit_2(cli_env, args, message):
    proc = run(cli_env, *args)
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1


def test_check_exit_codes_and_one_line_per_broken_pin(cli_env, tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text(f"flash_attn @ {FA_29}\nexllamav3==0.0.37+cu128.torch2.9.0\nfla-core==0.6.0\n")
    proc = run(cli_env, "check", "--torch", "2.11.0", "-r", str(req))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("flash_attn 2.8.3+cu128torch2.9: built for torch 2.9")
    assert lines[1].startswith("exllamav3 0.0.37+cu128.torch2.9.0: built for torch 2.9.0")
    ok = run(cli_env, "check", "--torch", "2.11.0", "--cuda", "13.0", "flash-attn==2.8.3+cu130torch2.11")
    assert ok.returncode == 0 and ok.stdout == "" and ok.stderr == ""


def test_show_and_stacks(cli_env):
    summary = run(cli_env, "show")
    assert summary.returncode == 0 and "flash_attn" in summary.stdout
    listing = run(cli_env, "show", "--component", "flash_attn", "--torch", "2.11", "--python", "3.12", "--limit", "5")
    assert listing.returncode == 0 and "2.8.3+cu130torch2.11" in listing.stdout
    stacks = run(cli_env, "stacks")
    assert stacks.returncode == 0
    for name in ("A", "B", "C", "D", "tabbyapi-cu12", "tabbyapi-cu13"):
        assert f"│ {name} " in stacks.stdout
    assert "exllamav3 disputed" in stacks.stdout and "libcudart.so.13" in stacks.stdout


def test_refresh_writes_into_out(cli_env, tmp_path):
    listing = tmp_path / "mine.txt"
    listing.write_text("# source: me\nhttps://x.invalid/fla_core-0.6.0-py3-none-any.whl sha256=" + "0" * 64 + "\n")
    proc = run(cli_env, "refresh", "--from", str(listing), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "1 wheels, 0 skipped" in proc.stdout
    assert 'source = "me"' in (tmp_path / "out" / "mine.toml").read_text()


def test_refresh_in_a_checkout_rewrites_the_top_level_wheels_matrix(cli_env, tmp_path):
    """In a checkout the matrix read, and rewritten by a refresh without --out, is the top-level wheels_matrix/ (the
    design card's folder, mapped into the package by setup.py), never a copy under src/."""
    repo = Path(__file__).resolve().parents[3]
    listing = tmp_path / "mine.txt"
    listing.write_text("# source: me\nhttps://x.invalid/fla_core-0.6.0-py3-none-any.whl sha256=" + "0" * 64 + "\n")
    proc = run(cli_env, "refresh", "--from", str(listing), "--dry", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["path"] == str(repo / "wheels_matrix" / "mine.toml")
    assert not (repo / "wheels_matrix" / "mine.toml").exists()


def test_a_bare_source_tree_reads_the_folders_beside_src(tmp_path):
    """PYTHONPATH=src with no install at all (-S: not even the editable one), as scripts/gpu-check runs on a lent
    machine: the templates and the matrix are the checkout's top-level folders."""
    repo = Path(__file__).resolve().parents[3]
    code = "from labwright import paths; print(paths.packaged_matrix_dir()); print(paths.templates_dir('tabbyapi'))"
    proc = subprocess.run([sys.executable, "-S", "-c", code], env={"PYTHONPATH": str(repo / "src")}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(repo / "wheels_matrix"), str(repo / "templates" / "tabbyapi")]


def test_matrix_dir_from_env(cli_env, tmp_path):
    proc = run({**cli_env, "LABWRIGHT_MATRIX_DIR": str(tmp_path)}, "show")
    assert proc.returncode == 2
    assert proc.stderr == f"labwright: error: LABWRIGHT_MATRIX_DIR={tmp_path} has no components.toml: point it at a " \
                          "wheels matrix directory\n"


# --- matrix refresh: bad input never replaces a family's data (exit 2, one line, nothing written) -------------------

def _matrix_copy(tmp_path):
    import shutil

    from labwright.paths import packaged_matrix_dir

    root = tmp_path / "matrix"
    shutil.copytree(packaged_matrix_dir(), root)
    return root


def _snapshot(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line_exit_2(proc, *needles):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


def test_refresh_refuses_a_flash_attn_listing_named_torch(cli_env, tmp_path):
    """The sweep's case: `--from <flash-attn listing> --name torch` replaced torch.toml (the default --out) and
    exited 0; every later resolve then failed."""
    root = _matrix_copy(tmp_path)
    before = _snapshot(root)
    proc = run(cli_env | {"LABWRIGHT_MATRIX_DIR": str(root)}, "refresh", "--from",
               str(root / "sources" / "flash_attn_prebuilt.md"), "--name", "torch")
    _one_line_exit_2(proc, "--name torch", "torch.toml holds torch wheels", "flash-attn", "pass the torch listing")
    assert _snapshot(root) == before
    resolved = run(cli_env | {"LABWRIGHT_MATRIX_DIR": str(root)}, "resolve", "--torch", "2.11.0", "--cuda", "13.0")
    assert resolved.returncode == 0, resolved.stderr


def test_refresh_refuses_foreign_wheels_into_an_unnamed_family_file(cli_env, tmp_path):
    """A name that names no component: the file's own content is its family."""
    out = tmp_path / "out"
    out.mkdir()
    torch_list = tmp_path / "mine.txt"
    torch_list.write_text("https://x.invalid/torch-2.11.0%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl\n")
    assert run(cli_env, "refresh", "--from", str(torch_list), "--out", str(out)).returncode == 0
    before = _snapshot(out)
    torch_list.write_text("https://x.invalid/flash_attn-2.8.3+cu130torch2.11-cp312-cp312-linux_x86_64.whl\n")
    proc = run(cli_env, "refresh", "--from", str(torch_list), "--out", str(out))
    _one_line_exit_2(proc, "--name mine", "holds torch wheels", "flash_attn")
    assert _snapshot(out) == before


def test_refresh_refuses_a_listing_that_drops_most_wheels_and_keeps_the_previous_file(cli_env, tmp_path):
    root = _matrix_copy(tmp_path)
    env = cli_env | {"LABWRIGHT_MATRIX_DIR": str(root)}
    full = (root / "sources" / "torch.txt").read_text().splitlines(keepends=True)
    wheel_lines = [i for i, line in enumerate(full) if line.strip() and not line.startswith("#")]
    truncated = tmp_path / "torch.txt"
    truncated.write_text("".join(full[:wheel_lines[2] + 1]))  # the headers and the first three wheels
    before = _snapshot(root)
    proc = run(env, "refresh", "--from", str(truncated))
    _one_line_exit_2(proc, f"--from {truncated}", "3 usable wheels would replace", "--allow-shrink")
    assert _snapshot(root) == before
    # Meant: it goes through, and the file it replaced is kept beside it (not read as matrix data).
    old = (root / "torch.toml").read_bytes()
    proc = run(env, "refresh", "--from", str(truncated), "--allow-shrink")
    assert proc.returncode == 0, proc.stderr
    assert (root / "torch.toml.prev").read_bytes() == old
    assert (root / "torch.toml").read_text().count("package = ") == 3
    assert not [p for p in root.iterdir() if ".labwright." in p.name]  # no temp file left


@pytest.mark.parametrize(
    ("content", "needle"),
    [(b"\xff\xfe t\x00o\x00r\x00c\x00h\x00", "is a binary file, not text (expected a wheel listing (--from"),
     (b"torch-2.11.0-cp312-cp312-linux_x86_64.whl \xe9t\xe9\n", "is not UTF-8 text (byte 0xe9 at offset 42")],
)
def test_refresh_non_utf8_listing_is_one_line(cli_env, tmp_path, content, needle):
    listing = tmp_path / "torch.txt"
    listing.write_bytes(content)
    out = tmp_path / "out"
    proc = run(cli_env, "refresh", "--from", str(listing), "--out", str(out))
    _one_line_exit_2(proc, str(listing), needle)
    assert not out.exists()


def test_a_non_utf8_matrix_file_is_one_line_naming_it(cli_env, tmp_path):
    root = _matrix_copy(tmp_path)
    (root / "fla.toml").write_bytes(b"kind = \"wheel-list\"\n# \xff\xfe\n")
    proc = run(cli_env | {"LABWRIGHT_MATRIX_DIR": str(root)}, "show")
    _one_line_exit_2(proc, str(root / "fla.toml"), "is not UTF-8 text", "expected a wheels matrix TOML")


def test_refresh_dry_run_refuses_an_out_the_real_run_could_not_write(cli_env, tmp_path):
    listing = tmp_path / "mine.txt"
    listing.write_text("https://x.invalid/torch-2.11.0%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for args in (["--dry"], []):
        proc = run(cli_env, "refresh", "--from", str(listing), "--out", str(blocker / "sub"), *args)
        _one_line_exit_2(proc, f"--out {blocker / 'sub'}: {blocker} is a file, not a directory")
    assert blocker.read_text() == "x"
