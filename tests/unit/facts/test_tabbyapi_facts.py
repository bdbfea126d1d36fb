"""TabbyapiNgramFiles: the fact's real shell command run here, its output parsed back byte for byte."""

from __future__ import annotations

import subprocess

from labwright.facts.tabbyapi import TabbyapiNgramFiles
from labwright.tabbyapi.ngram import MODEL_PY


def gather(source, config=None):
    fact = TabbyapiNgramFiles()
    proc = subprocess.run(["sh", "-c", fact.command(source=str(source), config=config)], capture_output=True,
                          text=True, check=True)
    # pyinfra hands a fact its output split into lines, stripped.
    return fact.process([line.strip() for line in proc.stdout.splitlines()])


def test_texts_come_back_with_tabs_trailing_spaces_and_blank_lines(tmp_path):
    model = tmp_path / MODEL_PY
    model.parent.mkdir(parents=True)
    text = "def f():\n\tg = AsyncGenerator(  \n\t\tnum_draft_tokens=self.draft_num_tokens,\n\n\t)\n"
    model.write_text(text)
    (tmp_path / "config.yml").write_text("")
    texts = gather(tmp_path)
    assert texts.model_py == text
    assert texts.config == ""
    assert texts.config_sample is None


def test_an_explicit_config_path_with_spaces(tmp_path):
    config = tmp_path / "my config.yml"
    config.write_text("draft_model:\n  draft_mode: ngram\n")
    texts = gather(tmp_path, str(config))
    assert texts.config == "draft_model:\n  draft_mode: ngram\n" and texts.model_py is None
