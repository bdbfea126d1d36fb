"""operations.tabbyapi.ngram for real: a fresh lab container over @lxd, the tabbyAPI STAND-IN's two shapes.

The stand-in (support.tabbyapi_standin) is checked out here and its files pushed into the container, as
a deploy's git checkout step would leave them; a tiny deploy file calls the operation.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from labwright.tabbyapi.ngram import ANCHOR, MODEL_PY
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import pyinfra_totals
from support.tabbyapi_standin import build_standin_repo

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SOURCE = "/opt/tabbyapi"
DEPLOY = """from labwright.operations import tabbyapi
tabbyapi.ngram(name="n-gram drafting", source="/opt/tabbyapi", match_min={n})
"""


def push_tree(lab: Lab, name: str, tree: Path) -> None:
    lab.client.exec(name, ["rm", "-rf", SOURCE])
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and ".git" not in p.parts):
        dest = f"{SOURCE}/{path.relative_to(tree).as_posix()}"
        assert lab.client.exec(name, ["mkdir", "-p", dest.rsplit("/", 1)[0]]).exit_code == 0
        lab.client.push_file(name, dest, path.read_bytes())


def cat(lab: Lab, name: str, path: str) -> str:
    result = lab.client.exec(name, ["cat", path])
    assert result.exit_code == 0, result.stderr.decode()
    return result.stdout.decode()


def run_deploy(name: str, tmp_path: Path, n: int = 3) -> subprocess.CompletedProcess[str]:
    deploy = tmp_path / "ngram_deploy.py"
    deploy.write_text(DEPLOY.format(n=n))
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "COLUMNS": "200"}
    return subprocess.run([str(BIN / "pyinfra"), "-y", "--json", f"@lxd/{name}", str(deploy)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    return build_standin_repo(tmp_path_factory.mktemp("standin") / "tabbyAPI")


def test_seed_era_is_patched_once_then_left_alone(lab, lab_container, standin, tmp_path):
    push_tree(lab, lab_container, standin.checkout(standin.seed_ref, tmp_path / "seed"))
    first = run_deploy(lab_container, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert pyinfra_totals(first.stdout + first.stderr).changed == 1
    model = cat(lab, lab_container, f"{SOURCE}/{MODEL_PY}")
    assert model.count("ngram_match_min=3,") == 1
    assert "                num_draft_tokens=self.draft_num_tokens,\n                ngram_match_min=3,\n" in model

    second = run_deploy(lab_container, tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert pyinfra_totals(second.stdout + second.stderr).changed == 0
    assert cat(lab, lab_container, f"{SOURCE}/{MODEL_PY}") == model


def test_config_era_sets_config_yml_and_leaves_the_source(lab, lab_container, standin, tmp_path):
    tree = standin.checkout(standin.config_ref, tmp_path / "config")
    push_tree(lab, lab_container, tree)
    first = run_deploy(lab_container, tmp_path, n=4)
    assert first.returncode == 0, first.stdout + first.stderr
    config = cat(lab, lab_container, f"{SOURCE}/config.yml")
    assert "  draft_mode: ngram\n  ngram_match_min: 4\n" in config
    assert cat(lab, lab_container, f"{SOURCE}/{MODEL_PY}") == (tree / MODEL_PY).read_text()
    second = run_deploy(lab_container, tmp_path, n=4)
    assert second.returncode == 0 and pyinfra_totals(second.stdout + second.stderr).changed == 0


def test_unrecognised_shape_fails_loudly_and_changes_nothing(lab, lab_container, standin, tmp_path):
    tree = standin.checkout(standin.seed_ref, tmp_path / "odd")
    model = tree / MODEL_PY
    model.write_text(model.read_text().replace("num_draft_tokens=self.draft_num_tokens", "draft_tokens=self.n"))
    push_tree(lab, lab_container, tree)
    proc = run_deploy(lab_container, tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"{SOURCE}/{MODEL_PY}" in output and ANCHOR in output
    assert cat(lab, lab_container, f"{SOURCE}/{MODEL_PY}") == model.read_text()


def test_reapplied_after_a_tabbyapi_update_and_config_era_after_an_upgrade(lab, lab_container, standin, tmp_path):
    seed = standin.checkout(standin.seed_ref, tmp_path / "seed")
    push_tree(lab, lab_container, seed)
    assert run_deploy(lab_container, tmp_path).returncode == 0
    # A re-checkout of the same ref (what `git pull`/`git checkout` does) brings the unpatched file back.
    push_tree(lab, lab_container, seed)
    again = run_deploy(lab_container, tmp_path)
    assert again.returncode == 0 and pyinfra_totals(again.stdout + again.stderr).changed == 1
    assert cat(lab, lab_container, f"{SOURCE}/{MODEL_PY}").count("ngram_match_min=3,") == 1
    # Upgrading to a config-era ref: the operation switches to config.yml by itself.
    push_tree(lab, lab_container, standin.checkout(standin.config_ref, tmp_path / "config"))
    upgraded = run_deploy(lab_container, tmp_path)
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    assert "draft_mode: ngram" in cat(lab, lab_container, f"{SOURCE}/config.yml")


def test_a_configured_draft_model_is_refused_on_the_host(lab, lab_container, standin, tmp_path):
    tree = standin.checkout(standin.seed_ref, tmp_path / "draft")
    (tree / "config.yml").write_text("draft_model:\n  draft_model_name: tiny-draft\n")
    push_tree(lab, lab_container, tree)
    proc = run_deploy(lab_container, tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "draft_model_name" in output and "tiny-draft" in output
    assert cat(lab, lab_container, f"{SOURCE}/{MODEL_PY}") == (tree / MODEL_PY).read_text()
