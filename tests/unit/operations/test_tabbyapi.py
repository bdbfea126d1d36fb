"""operations.tabbyapi.ngram through pyinfra's own runner on @local (a temp checkout), run twice as pyinfra does.

The lab test (tests/integration/test_tabbyapi_ngram.py) does the same over @lxd; this one needs no LXD.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from labwright.tabbyapi.ngram import MODEL_PY
from labwright.testing.pyinfra_output import pyinfra_totals
from support.tabbyapi_standin import build_standin_repo

DEPLOY = """from labwright.operations import tabbyapi
tabbyapi.ngram(name="n-gram drafting", source={source!r}, match_min={n})
"""


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    return build_standin_repo(tmp_path_factory.mktemp("standin") / "tabbyAPI")


def deploy(cli_env, tree: Path, n: int = 3) -> tuple[int, str, int]:
    path = tree.parent / f"deploy_{tree.name}.py"
    path.write_text(DEPLOY.format(source=str(tree), n=n))
    proc = subprocess.run(["pyinfra", "-y", "--json", "@local", str(path)], capture_output=True, text=True, env=cli_env,
                          cwd=tree.parent, timeout=120)
    output = proc.stdout + proc.stderr
    changed = pyinfra_totals(output).changed if proc.returncode == 0 else -1
    return proc.returncode, output, changed


def test_patch_then_nothing_then_a_new_value(cli_env, standin, tmp_path):
    tree = standin.checkout(standin.seed_ref, tmp_path / "seed")
    assert deploy(cli_env, tree)[2] == 1
    patched = (tree / MODEL_PY).read_text()
    assert patched.count("ngram_match_min=3,") == 1
    rc, output, changed = deploy(cli_env, tree)
    assert (rc, changed) == (0, 0), output
    assert (tree / MODEL_PY).read_text() == patched
    assert deploy(cli_env, tree, n=5)[2] == 1
    assert (tree / MODEL_PY).read_text() == patched.replace("ngram_match_min=3,", "ngram_match_min=5,")


def test_config_era_then_nothing(cli_env, standin, tmp_path):
    tree = standin.checkout(standin.config_ref, tmp_path / "config")
    assert deploy(cli_env, tree)[2] == 1
    assert "draft_mode: ngram" in (tree / "config.yml").read_text()
    assert deploy(cli_env, tree)[2] == 0


def test_unrecognised_fails_with_file_and_anchor(cli_env, standin, tmp_path):
    tree = standin.checkout(standin.seed_ref, tmp_path / "odd")
    model = tree / MODEL_PY
    model.write_text(model.read_text().replace("num_draft_tokens=self.draft_num_tokens,", "num_draft=1,"))
    rc, output, _ = deploy(cli_env, tree)
    assert rc != 0 and str(model) in output and "num_draft_tokens=self.draft_num_tokens," in output
