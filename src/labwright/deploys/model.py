"""A Hugging Face model downloaded into the guest's model directory, verified, linked as MODELS_DIR/NAME.

The settings are labwright.models.deploy_data (pure); the download runs in the guest with labwright.models.fetch
(shipped as one file, run by a venv that has huggingface_hub). See deploys/model.py (the pyinfra CLI shim, with usage)
and docs/models.md.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.api import FactBase
from pyinfra.api.exceptions import DeployError
from pyinfra.api.operation import OperationMeta
from pyinfra.facts.files import FindInFile
from pyinfra.operations import files, server

from labwright.deploys.common import LOCKS_DIR, index_lock, install_missing, pip_requirements
from labwright.errors import BadInput
from labwright.guestlock import locked
from labwright.models import fetch
from labwright.models.deploy_data import ModelSettings, settings
from labwright.shell import quote
from labwright.snapshots.deploy import check_snapshot_data

VENV_MARKER = ".labwright-requirements"


class ModelState(FactBase):
    """``("complete", "")`` when the guest's marker says MODELS_DIR/NAME is complete for this spec (marker, link,
    every file with its size: no network); else the Hub is asked whether the repo, revision and file exist:
    ``("refused", LINE)`` or ``("incomplete", "")``. The runner's own source runs on the guest's python3 from stdin,
    so this works before anything is installed."""

    def command(self, probe: str) -> str:
        return probe

    def process(self, output: list[str]) -> tuple[str, str]:
        text = "\n".join(output).strip()
        if text == "complete":
            return "complete", ""
        if text.startswith("refused "):
            return "refused", text[len("refused "):].splitlines()[0]
        return "incomplete", ""


def model_settings() -> ModelSettings:
    """This host's settings; a bad value is a DeployError: one line naming the key, nothing changed."""
    try:
        return settings(host.data.dict())
    except BadInput as exc:
        raise DeployError(f"{exc} (nothing was changed)") from None


def probe(s: ModelSettings) -> str:
    """While pyinfra prepares: ``complete`` (the guest's marker says MODEL_DIR/NAME is complete for this spec, no
    network) or ``incomplete``; a repo, revision or file the Hub does not have is a DeployError (one line, nothing
    run)."""
    state, refusal = host.get_fact(ModelState, probe=s.probe_command(runner_source()))
    if state == "refused":
        raise DeployError(f"{refusal.removesuffix('; nothing was downloaded')}; nothing was changed")
    return str(state)


#: The labwright modules the runner reads its environment through (fetch.labwright_env), carried in its text: a guest
#: has no labwright (standard library only, no pydantic: labwright.schema.env imports it for a URL variable only).
CARRIED_MODULES = ("labwright", "labwright.errors", "labwright.schema", "labwright.schema.env")


def runner_source() -> str:
    """models/fetch.py as the guest runs it (the file put, the probe's stdin), its CARRIED modules filled in."""
    import importlib

    text = Path(fetch.__file__).read_text(encoding="utf-8")
    carried = {name: Path(str(importlib.import_module(name).__file__)).read_text(encoding="utf-8")
               for name in CARRIED_MODULES}
    empty = "CARRIED: dict[str, str] = {}\n"
    if empty not in text:
        raise DeployError(f"{fetch.__file__}: no '{empty.strip()}' line to carry labwright.schema.env in")
    return text.replace(empty, f"CARRIED: dict[str, str] = {carried!r}\n", 1)


def download(s: ModelSettings, state: str, what: str = "model download packages") -> OperationMeta | None:
    """The operations that make MODEL_DIR/NAME complete (python3-venv, the venv with huggingface_hub, the runner,
    the download when ``state`` is not complete); the download operation, or None when there is nothing to download.
    An engine deploy restarts the engine onto the model when ``download.did_change()``."""
    install_missing(s.runtime_packages, what)
    files.directory(name=f"Model directory {s.dir}", path=s.dir, present=True, mode="755")
    runner_dir = str(Path(s.runner).parent)
    files.directory(name=f"Runner directory {runner_dir}", path=runner_dir, present=True, mode="755")
    files.put(name=f"Runner {s.runner}", src=StringIO(runner_source()),
              dest=s.runner, user="root", group="root", mode="644")

    # From a hashed lock (docs/security.md, "Every download pinned"): the wheelhouse's, or one made here from what
    # PyPI publishes; the marker says so, so a venv installed before locks is installed again from one.
    requirement_text = f"{s.hub_requirement} from {s.find_links or 'PyPI'}, hashed lock\n"
    if not host.get_fact(FindInFile, path=f"{s.venv}/{VENV_MARKER}", pattern=f"^{requirement_text.strip()}$"):
        args = (pip_requirements(s.find_links, "", quote(s.hub_requirement)) if s.find_links else
                index_lock([s.hub_requirement], "", f"{LOCKS_DIR}/model-download.lock", s.hub_requirement))
        server.shell(name=f"{s.hub_requirement} into {s.venv}", commands=[
            f"test -x {s.venv}/bin/pip || python3 -m venv {s.venv}",
            f"{s.venv}/bin/pip install -q --disable-pip-version-check {args}",
            f"printf '%s' {quote(requirement_text)} > {s.venv}/{VENV_MARKER}",
        ])
    if state == "complete":
        return None
    return server.shell(name=f"Download {s.spec.label()} -> {s.dir}/{s.spec.name} (checksums verified)",
                        commands=[s.download_command()], _timeout=s.download_timeout)


def readable_after_download(path: str, user: str, key: str, download: OperationMeta) -> None:
    """After a download in this run: ``user`` (the engine's service user, created before this) can read ``path``,
    else one line naming the data key; the engine is not (re)started onto a model it cannot read."""
    quoted = quote(path)
    line = quote(f"labwright: {key}: {path} is not readable by the service user {user}: make the model "
                       "directory world- or group-readable (the engine was not restarted)")
    server.shell(name=f"{path} readable by {user}", _if=download.did_change,
                 commands=[f"runuser -u {quote(user)} -- test -r {quoted} || {{ echo {line} >&2; exit 1; }}"])


@locked("Model download")
def deploy_model() -> None:
    """huggingface_hub in a venv, the runner, then the download when the model is not complete yet.

    A re-run with the same data finds the marker complete and changes nothing (no network call). A repo, revision or
    file the Hub does not have stops the run with one line; a file whose checksum differs from the Hub's is removed and
    nothing is marked complete, so MODELS_DIR/NAME never points at a truncated or corrupted model.
    """
    check_snapshot_data()
    s = model_settings()
    download(s, probe(s))
