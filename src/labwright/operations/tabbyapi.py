"""pyinfra operations for tabbyAPI: n-gram drafting, version-aware.

The decision is the pure planner's (labwright.tabbyapi.ngram), computed here from the host's files (the
TabbyapiNgramFiles fact); the host only receives the finished file. Placed after the git checkout step of a
deploy, it re-applies itself after every tabbyAPI update: a new checkout resets model.py, the fact shows the
patch-era shape again, and the patch goes back in; on config-era refs it sets config.yml instead.
"""

from __future__ import annotations

import posixpath
from io import StringIO

from pyinfra import host
from pyinfra.api import operation
from pyinfra.api.exceptions import OperationError
from pyinfra.operations import files

from labwright.errors import LabwrightError
from labwright.facts.tabbyapi import TabbyapiNgramFiles, config_path
from labwright.tabbyapi.ngram import DEFAULT_MATCH_MIN, MODEL_PY, TabbyTexts, plan_ngram


@operation()
def ngram(source: str = "/opt/tabbyapi", config: str | None = None, match_min: int = DEFAULT_MATCH_MIN,
          user: str | None = None, group: str | None = None):
    """
    Turn on exllamav3 n-gram drafting: config.yml keys where tabbyAPI has them, else patch model.py.

    + source: the tabbyAPI checkout on the host
    + config: the config.yml tabbyAPI reads (default ``SOURCE/config.yml``)
    + match_min: ``ngram_match_min``, the tokens that must match before a draft (field note 001 used 3)
    + user / group: owner of a config.yml this creates (an existing file keeps its owner and mode)

    Fails, changing nothing, when a draft model is configured (exllamav3 asserts on both) or when model.py has
    neither known shape (the message names the file and the anchor). A second run changes nothing.
    Restart tabbyAPI afterwards for the change to take effect (the deploy's service step does).

    **Example:**

    .. code:: python

        from labwright.operations import tabbyapi
        tabbyapi.ngram(name="n-gram drafting", source="/opt/tabbyapi", match_min=3)
    """
    found = host.get_fact(TabbyapiNgramFiles, source=source, config=config)
    texts = TabbyTexts(found.model_py, found.config_sample, found.config,
                       posixpath.join(source, MODEL_PY), config_path(source, config), source)
    try:
        change = plan_ngram(texts, match_min)
        change.raise_for_mode()
    except LabwrightError as exc:
        raise OperationError(str(exc)) from exc
    if change.new_text is None:
        host.noop(change.message)
        return
    owner = {"user": user, "group": group} if change.file != texts.model_py_path else {}
    yield from files.put._inner(src=StringIO(change.new_text), dest=change.file, **owner)
