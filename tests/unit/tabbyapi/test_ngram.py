"""n-gram drafting: both tabbyAPI shapes, idempotency, refusals, loud failures, the CLI's JSON and exit codes."""

from __future__ import annotations

import json

import pytest

from labwright.errors import BadInput
from labwright.tabbyapi import config_edit
from labwright.tabbyapi.ngram import (
    ANCHOR,
    MODEL_PY,
    DraftModelConfigured,
    ShapeUnrecognised,
    TabbyTexts,
    plan_ngram,
    plan_patch,
)
from support.cli_child import run_cli
from support.tabbyapi_standin import (
    CONFIG_CONFIG_SAMPLE,
    CONFIG_MODEL_PY,
    SEED_CONFIG_SAMPLE,
    SEED_MODEL_PY,
    build_standin_repo,
)

SEED_CALL = """            self.generator = AsyncGenerator(
                model=self.model,
                num_draft_tokens=self.draft_num_tokens,
            )
"""


def call(indent: str, body_indent: str, *extra: str) -> str:
    lines = [f"{indent}g = AsyncGenerator(", f"{body_indent}model=self.model,",
             f"{body_indent}num_draft_tokens=self.draft_num_tokens,", *(f"{body_indent}{e}" for e in extra),
             f"{indent})"]
    return "def f(self):\n" + "\n".join(lines) + "\n"


def apply(source: str, n: int = 3) -> str:
    change = plan_patch(source, MODEL_PY, n)
    assert change.ok, change.message
    return change.new_text if change.new_text is not None else source


def test_seed_shape_is_patched_once_with_the_anchor_indentation():
    change = plan_patch(SEED_MODEL_PY, MODEL_PY, 3)
    assert change.mode == "patch"
    assert "                num_draft_tokens=self.draft_num_tokens,\n                ngram_match_min=3,\n" \
        in (change.new_text or "")
    changed = [line for line in change.diff.splitlines()[2:] if line[:1] in "+-"]
    assert changed == ["+                ngram_match_min=3,"]
    assert change.diff.startswith(f"--- a/{MODEL_PY}\n+++ b/{MODEL_PY}\n")
    compile(change.new_text or "", "model.py", "exec")


@pytest.mark.parametrize(("indent", "body"), [("    ", "        "), ("\t", "\t\t"), ("", "  "), (" " * 12, " " * 16),
                                             ("\t\t", "\t\t    ")])
def test_indentation_is_that_of_the_anchor_line(indent, body):
    patched = apply(call(indent, body))
    assert f"{body}num_draft_tokens=self.draft_num_tokens,\n{body}ngram_match_min=3,\n{indent})" in patched


def test_crlf_line_endings_are_kept():
    patched = apply(call("    ", "        ").replace("\n", "\r\n"))
    assert "        ngram_match_min=3,\r\n" in patched and "\n" not in patched.replace("\r\n", "")


def test_anchor_followed_by_more_arguments_on_the_same_line():
    source = "g = AsyncGenerator(model=m, num_draft_tokens=self.draft_num_tokens, tokenizer=t)\n"
    assert apply(source) == "g = AsyncGenerator(model=m, num_draft_tokens=self.draft_num_tokens, ngram_match_min=3," \
        " tokenizer=t)\n"


def test_trailing_comment_on_the_anchor_line_stays_put():
    patched = apply(call("    ", "        ").replace("draft_num_tokens,\n", "draft_num_tokens,  # speculative\n"))
    assert "draft_num_tokens,  # speculative\n        ngram_match_min=3,\n" in patched


@pytest.mark.parametrize("n", [1, 3, 8])
def test_apply_twice_equals_apply_once(n):
    once = apply(SEED_MODEL_PY, n)
    assert apply(once, n) == once
    again = plan_patch(once, MODEL_PY, n)
    assert again.mode == "already" and again.diff == "" and again.new_text is None


def test_a_different_n_is_updated_in_place():
    three = apply(SEED_MODEL_PY, 3)
    change = plan_patch(three, MODEL_PY, 5)
    assert change.mode == "patch"
    assert change.new_text == three.replace("ngram_match_min=3,", "ngram_match_min=5,")
    assert "-                ngram_match_min=3,\n+                ngram_match_min=5,\n" in change.diff


def test_the_seeds_own_patch_with_its_comment_is_recognised_as_already():
    seed_sed = "draft_num_tokens,\n                ngram_match_min=3, # added\n"
    seeded = SEED_MODEL_PY.replace("draft_num_tokens,\n", seed_sed)
    assert plan_patch(seeded, MODEL_PY, 3).mode == "already"


def test_anchor_in_comments_and_strings_is_ignored():
    source = ('# num_draft_tokens=self.draft_num_tokens,\n'
              'DOC = "AsyncGenerator(num_draft_tokens=self.draft_num_tokens,)"\n' + call("    ", "        "))
    patched = apply(source)
    assert patched.count("ngram_match_min=3") == 1 and "        ngram_match_min=3,\n    )" in patched


def test_nested_calls_inside_the_arguments_do_not_confuse_the_parenthesis_match():
    source = call("    ", "        ", "cpu_cache_size=size(a, (b, c)) * 2,", "extra={'x': [1, (2)]},")
    patched = apply(source)
    assert "draft_num_tokens,\n        ngram_match_min=3,\n        cpu_cache_size" in patched
    compile(patched, "m.py", "exec")


UNRECOGNISED = {
    "renamed anchor": SEED_MODEL_PY.replace("num_draft_tokens=self.draft_num_tokens", "draft_tokens=self.num_draft"),
    "anchor outside the call": ("def f(self):\n    kwargs = dict(num_draft_tokens=self.draft_num_tokens,)\n"
                                "    g = AsyncGenerator(\n        model=self.model,\n    )\n"),
    "call without the anchor": "g = AsyncGenerator(\n    model=m,\n    tokenizer=t,\n)\n",
    "no call at all": "num_draft_tokens=self.draft_num_tokens,\n",
    "anchor without its comma": "g = AsyncGenerator(\n    num_draft_tokens=self.draft_num_tokens\n)\n",
    "two calls with the anchor": call("", "    ") + call("", "    "),
    "ngram argument that is not a number": call("", "    ", "ngram_match_min=some_function(),"),
    "broken python": "g = AsyncGenerator(\n    num_draft_tokens=self.draft_num_tokens,\n",
}


@pytest.mark.parametrize("name", UNRECOGNISED)
def test_unrecognised_shapes_fail_loudly_naming_file_and_anchor(name):
    change = plan_patch(UNRECOGNISED[name], "/opt/tabbyapi/backends/exllamav3/model.py", 3)
    assert change.mode == "unrecognised" and change.new_text is None and change.diff == ""
    assert change.message.startswith("/opt/tabbyapi/backends/exllamav3/model.py: ")
    assert f"`{ANCHOR}`" in change.message and "`AsyncGenerator(`" in change.message
    assert "\n" not in change.message
    with pytest.raises(ShapeUnrecognised, match="nothing changed"):
        change.raise_for_mode()


def test_config_era_sets_the_config_and_leaves_the_source_alone():
    texts = TabbyTexts(CONFIG_MODEL_PY, CONFIG_CONFIG_SAMPLE, CONFIG_CONFIG_SAMPLE)
    change = plan_ngram(texts, 4)
    assert change.mode == "config" and change.file == "config.yml"
    assert config_edit.draft_section(change.new_text or "") == {
        **config_edit.draft_section(CONFIG_CONFIG_SAMPLE), "draft_mode": "ngram", "ngram_match_min": 4}
    # Only the two values changed: every comment and every other line is as it was.
    changed = [line for line in change.diff.splitlines()[2:] if line[:1] in "+-"]
    assert changed == ["-  draft_mode: model", "+  draft_mode: ngram", "-  ngram_match_min: 2", "+  ngram_match_min: 4"]
    assert (change.new_text or "").count("#") == CONFIG_CONFIG_SAMPLE.count("#")
    again = plan_ngram(TabbyTexts(CONFIG_MODEL_PY, CONFIG_CONFIG_SAMPLE, change.new_text), 4)
    assert again.mode == "already" and again.new_text is None


def test_config_era_is_told_by_the_call_when_config_sample_is_missing():
    change = plan_ngram(TabbyTexts(CONFIG_MODEL_PY, None, None), 3)
    assert change.mode == "config"
    assert config_edit.load(change.new_text or "") == {"draft_model": {"draft_mode": "ngram", "ngram_match_min": 3}}


def test_config_edit_adds_missing_keys_after_the_blocks_last_entry_and_keeps_other_blocks():
    text = ("network:\n  port: 5000 # keep me\ndraft_model:\n    draft_model_dir: models\n\n"
            "# sampling next\nsampling: {}\n")
    after = config_edit.set_draft_keys(text, {"draft_mode": "ngram", "ngram_match_min": 3})
    assert after == ("network:\n  port: 5000 # keep me\ndraft_model:\n    draft_model_dir: models\n"
                     "    draft_mode: ngram\n    ngram_match_min: 3\n\n# sampling next\nsampling: {}\n")


def test_config_edit_keeps_a_trailing_comment_on_a_replaced_value():
    after = config_edit.set_draft_keys("draft_model:\n  draft_mode: model  # why\n", {"draft_mode": "ngram"})
    assert after == "draft_model:\n  draft_mode: ngram  # why\n"


def test_config_edit_keeps_crlf_line_endings():
    after = config_edit.set_draft_keys("a: 1\r\ndraft_model:\r\n  draft_model_dir: m\r\n", {"draft_mode": "ngram"})
    assert after == "a: 1\r\ndraft_model:\r\n  draft_model_dir: m\r\n  draft_mode: ngram\r\n"


def test_cli_keeps_crlf_when_writing(cli_env, standin, tmp_path):
    tree = standin.checkout(standin.seed_ref, tmp_path / "t")
    model = tree / MODEL_PY
    model.write_bytes(model.read_bytes().replace(b"\n", b"\r\n"))
    assert run(cli_env, "--source", str(tree)).returncode == 0
    patched = model.read_bytes()
    assert b"ngram_match_min=3,\r\n" in patched and patched.count(b"\n") == patched.count(b"\r\n")


def test_cli_config_that_is_a_directory_is_one_line_exit_2(cli_env, standin, tmp_path):
    tree = standin.checkout(standin.config_ref, tmp_path / "t")
    (tree / "config.yml").mkdir()
    proc = run(cli_env, "--source", str(tree))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"labwright: error: {tree / 'config.yml'} is a directory, not a file")
    assert not any((tree / "config.yml").iterdir())


def test_config_edit_refuses_flow_style_instead_of_corrupting_it():
    with pytest.raises(config_edit.ConfigShapeError, match="flow style"):
        config_edit.set_draft_keys("draft_model: {draft_mode: model}\n", {"draft_mode": "ngram"})


@pytest.mark.parametrize(("model_py", "sample"), [(SEED_MODEL_PY, SEED_CONFIG_SAMPLE),
                                                   (CONFIG_MODEL_PY, CONFIG_CONFIG_SAMPLE)])
def test_a_configured_draft_model_is_refused_in_both_eras(model_py, sample):
    config = sample.replace("  draft_model_name:\n", "  draft_model_name: tiny-draft\n")
    change = plan_ngram(TabbyTexts(model_py, sample, config, config_path="/opt/tabbyapi/config.yml"), 3)
    assert change.mode == "refused" and change.file == "/opt/tabbyapi/config.yml" and change.new_text is None
    assert "tiny-draft" in change.message and "draft_model_name" in change.message
    with pytest.raises(DraftModelConfigured):
        change.raise_for_mode()


def test_config_era_refuses_mtp_drafting_too():
    config = CONFIG_CONFIG_SAMPLE.replace("  draft_mode: model\n", "  draft_mode: mtp\n")
    change = plan_ngram(TabbyTexts(CONFIG_MODEL_PY, CONFIG_CONFIG_SAMPLE, config), 3)
    assert change.mode == "refused" and "'mtp'" in change.message


def test_config_era_ignores_a_draft_model_name_once_draft_mode_is_ngram():
    # tabbyAPI >= 004e837 loads draft_model_name only in draft_mode: model, so this is already n-gram drafting.
    config = (CONFIG_CONFIG_SAMPLE.replace("  draft_model_name:\n", "  draft_model_name: tiny-draft\n")
              .replace("  draft_mode: model\n", "  draft_mode: ngram\n")
              .replace("ngram_match_min: 2", "ngram_match_min: 3"))
    assert plan_ngram(TabbyTexts(CONFIG_MODEL_PY, CONFIG_CONFIG_SAMPLE, config), 3).mode == "already"


def test_bad_match_min_is_bad_input():
    with pytest.raises(BadInput, match="--min 0"):
        plan_ngram(TabbyTexts(SEED_MODEL_PY, None, None), 0)


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    return build_standin_repo(tmp_path_factory.mktemp("standin") / "tabbyAPI")


def test_standin_refs_give_patch_and_config(standin, tmp_path):
    from labwright.tabbyapi.ngram import read_tree

    seed = standin.checkout(standin.seed_ref, tmp_path / "seed")
    config = standin.checkout(standin.config_ref, tmp_path / "config")
    assert plan_ngram(read_tree(seed)).mode == "patch"
    assert plan_ngram(read_tree(config)).mode == "config"


def run(cli_env, *args):
    return run_cli(["tabbyapi", "ngram", *args], env=cli_env)


def test_cli_patch_then_already_with_json_and_exit_0(cli_env, standin, tmp_path):
    tree = standin.checkout(standin.seed_ref, tmp_path / "t")
    first = run(cli_env, "--source", str(tree), "--json")
    assert first.returncode == 0, first.stderr
    data = json.loads(first.stdout)
    assert set(data) == {"mode", "file", "diff"}
    assert data["mode"] == "patch" and data["file"] == str(tree / MODEL_PY) and "+" in data["diff"]
    assert "ngram_match_min=3," in (tree / MODEL_PY).read_text()
    second = run(cli_env, "--source", str(tree), "--json")
    assert second.returncode == 0 and json.loads(second.stdout) == {"mode": "already", "file": data["file"], "diff": ""}


def test_cli_dry_writes_nothing(cli_env, standin, tmp_path):
    tree = standin.checkout(standin.config_ref, tmp_path / "t")
    proc = run(cli_env, "--source", str(tree), "--min", "4", "--dry")
    assert proc.returncode == 0, proc.stderr
    assert "+  ngram_match_min: 4" in proc.stdout and not (tree / "config.yml").exists()


def test_cli_config_mode_writes_the_given_config(cli_env, standin, tmp_path):
    tree = standin.checkout(standin.config_ref, tmp_path / "t")
    target = tmp_path / "etc-config.yml"
    target.write_text(CONFIG_CONFIG_SAMPLE)
    proc = run(cli_env, "--source", str(tree), "--config", str(target), "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["mode"] == "config"
    assert config_edit.draft_section(target.read_text())["draft_mode"] == "ngram"


def test_cli_refused_and_unrecognised_exit_1_in_one_line(cli_env, standin, tmp_path):
    tree = standin.checkout(standin.seed_ref, tmp_path / "t")
    (tree / "config.yml").write_text("draft_model:\n  draft_model_name: tiny-draft\n")
    refused = run(cli_env, "--source", str(tree), "--json")
    assert refused.returncode == 1 and json.loads(refused.stdout)["mode"] == "refused"
    assert refused.stderr.count("\n") == 1 and "draft_model_name" in refused.stderr
    (tree / "config.yml").unlink()
    model = tree / MODEL_PY
    model.write_text(UNRECOGNISED["renamed anchor"])
    before = model.read_text()
    odd = run(cli_env, "--source", str(tree), "--json")
    assert odd.returncode == 1 and json.loads(odd.stdout) == {"mode": "unrecognised", "file": str(model), "diff": ""}
    assert odd.stderr.count("\n") == 1 and str(model) in odd.stderr and ANCHOR in odd.stderr
    assert model.read_text() == before


@pytest.mark.parametrize("args", [["--source", "/nonexistent/tabbyapi"], ["--min", "-1"], []])
def test_cli_bad_input_exits_2(cli_env, tmp_path, args):
    if args and args[0] == "--min":
        args = ["--source", str(tmp_path), *args]
    proc = run(cli_env, *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""


# --- config.yml however it is written: a BOM, quoted or explicit keys, duplicates; --min bounds; unreadable files --

BOM = "\ufeff"
NGRAM = {"draft_mode": "ngram", "ngram_match_min": 3}


@pytest.mark.parametrize(
    "header",
    ["draft_model:", '"draft_model":', "'draft_model':", "draft_model :", "? draft_model\n:", "draft_model:  # set"],
)
@pytest.mark.parametrize("bom", ["", BOM])
def test_an_existing_draft_model_block_is_edited_however_its_key_is_written(header, bom):
    """The sweep's damage: a config.yml starting with a BOM got a second top-level `draft_model:` appended, which
    tabbyAPI's loader (ruamel, duplicate keys refused) then rejected at start."""
    text = f"{bom}network:\n  port: 5000\n{header}\n  draft_mode: model\n  draft_model_dir: models\nsampling: {{}}\n"
    after = config_edit.set_draft_keys(text, NGRAM)
    assert after.startswith(bom + "network:")  # the BOM kept as it was, once
    assert after.count("draft_model") == text.count("draft_model")  # no second block, no duplicated key
    assert config_edit.load(after)["draft_model"] == {"draft_mode": "ngram", "draft_model_dir": "models",
                                                      "ngram_match_min": 3}
    assert config_edit.set_draft_keys(after, NGRAM) == after  # a second run changes nothing


def test_a_bom_file_in_config_era_is_changed_once_then_already(standin, tmp_path):
    from labwright.tabbyapi.ngram import read_tree

    tree = standin.checkout(standin.config_ref, tmp_path / "t")
    (tree / "config.yml").write_bytes(BOM.encode() + CONFIG_CONFIG_SAMPLE.encode())
    change = plan_ngram(read_tree(tree), 3)
    assert change.mode == "config" and change.new_text is not None
    assert change.new_text.startswith(BOM) and change.new_text.count("\ndraft_model:") == 1
    (tree / "config.yml").write_bytes(change.new_text.encode())
    assert plan_ngram(read_tree(tree), 3).mode == "already"


def test_quoted_and_empty_values_are_set_in_place():
    text = 'draft_model:\n  "draft_mode": model  # why\n  ngram_match_min:\n'
    after = config_edit.set_draft_keys(text, NGRAM)
    assert after == 'draft_model:\n  "draft_mode": ngram  # why\n  ngram_match_min: 3\n'


def test_an_empty_draft_model_block_gets_its_keys_under_it():
    after = config_edit.set_draft_keys("draft_model:\nsampling:\n  x: 1\n", NGRAM)
    assert after == "draft_model:\n  draft_mode: ngram\n  ngram_match_min: 3\nsampling:\n  x: 1\n"


def test_a_config_that_already_has_a_duplicate_key_is_refused_naming_both_lines():
    text = "draft_model:\n  draft_mode: model\nnetwork: {}\ndraft_model:\n  draft_mode: mtp\n"
    with pytest.raises(config_edit.ConfigShapeError, match=r"`draft_model` twice in one mapping \(lines 1 and 4\)"):
        config_edit.set_draft_keys(text, NGRAM)
    change = plan_ngram(TabbyTexts(CONFIG_MODEL_PY, CONFIG_CONFIG_SAMPLE, text), 3)
    assert change.mode == "unrecognised" and change.new_text is None and "twice" in change.message


@pytest.mark.parametrize(
    ("value", "config", "message"),
    [(10**12, None, "--min 1000000000000: longer than any context"),
     (2**20 + 1, None, "longer than any context"),
     (8192, "model:\n  max_seq_len: 8192\n", "--min 8192: a match that long never happens within config.yml's "
                                             "model.max_seq_len 8192"),
     (0, None, "--min 0")],
)
def test_match_min_is_bounded_by_what_drafting_can_reach(value, config, message):
    with pytest.raises(BadInput, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_ngram(TabbyTexts(CONFIG_MODEL_PY, CONFIG_CONFIG_SAMPLE, config), value)
    assert plan_ngram(TabbyTexts(CONFIG_MODEL_PY, CONFIG_CONFIG_SAMPLE, config), 3).mode == "config"


def _tree_snapshot(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("args", "config", "needle"),
    [(["--min", "1000000000000"], None, "--min 1000000000000: longer than any context"),
     (["--min", "4096"], b"model:\n  max_seq_len: 4096\n", "--min 4096: a match that long never happens"),
     ([], b"GGUF\x03\x00\x00\x00" + bytes(range(256)), "config.yml is a binary file"),
     ([], b"draft_model:\n  draft_mode: \xe9t\xe9\n", "config.yml is not UTF-8 text (byte 0xe9 at offset 27)")],
    ids=["huge-min", "min-over-context", "gguf-as-config", "latin1-config"],
)
def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(cli_env, standin, tmp_path, args, config, needle):
    tree = standin.checkout(standin.config_ref, tmp_path / "t")
    if config is not None:
        (tree / "config.yml").write_bytes(config)
    before = _tree_snapshot(tree)
    proc = run(cli_env, "--source", str(tree), *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr and needle in proc.stderr, proc.stderr
    assert proc.stdout == "" and _tree_snapshot(tree) == before


def test_cli_keeps_the_replaced_config_as_prev(cli_env, standin, tmp_path):
    tree = standin.checkout(standin.config_ref, tmp_path / "t")
    original = BOM.encode() + CONFIG_CONFIG_SAMPLE.encode()
    (tree / "config.yml").write_bytes(original)
    proc = run(cli_env, "--source", str(tree), "--min", "4")
    assert proc.returncode == 0, proc.stderr
    assert (tree / "config.yml.prev").read_bytes() == original
    assert config_edit.draft_section((tree / "config.yml").read_text(encoding="utf-8-sig"))["ngram_match_min"] == 4
    assert not list(tree.glob(".config.yml.labwright.*"))


def test_cli_a_source_that_is_no_checkout_and_a_missing_explicit_config_are_bad_input(cli_env, standin, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run(cli_env, "--source", str(empty))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"--source {empty}: not a tabbyAPI checkout (no main.py, no {MODEL_PY})" in proc.stderr
    assert not any(empty.iterdir())
    tree = standin.checkout(standin.config_ref, tmp_path / "t")
    typo = tmp_path / "etc" / "confg.yml"
    typo.parent.mkdir()
    proc = run(cli_env, "--source", str(tree), "--config", str(typo))
    assert proc.returncode == 2 and f"--config {typo}: no such file" in proc.stderr and proc.stderr.count("\n") == 1
    assert not typo.exists() and not (tree / "config.yml").exists()
