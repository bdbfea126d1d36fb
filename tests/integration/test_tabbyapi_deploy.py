"""deploys/tabbyapi.py for real: one fresh lab container over @lxd, with STAND-INS for what the lab lacks.

- tabbyAPI -> the stand-in git repository (support.tabbyapi_standin: tags seed-era, config-era, plus an
  "odd-shape" commit made here), served over git's dumb HTTP from this machine's test-lab bridge address, so the
  guest runs a real ``git fetch`` of the pinned ref;
- engine stacks -> stand-in torch/extension wheels and matrix (support.stacks), switched by the real
  stack operation (build beside, ABI verify, swap, restart, health);
- model weights -> an empty model directory; VRAM -> the stand-in's ``standin.max_cache_size`` limit;
- NVIDIA driver -> a fake /proc + library tree (support.fake_nvidia) pushed into the guest.

The container is deployed once (module fixture) and each test leaves it deployed with the default data, as found.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from labwright.tabbyapi.ngram import ANCHOR, MODEL_PY
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import DeployRun
from support.fake_nvidia import DRIVER_VERSION, VERSION_TEXT, make_container_libraries
from support.stacks import StandinStacks, build_standin_stacks
from support.tabbyapi_lab import (
    MODEL_NAME,
    SERVICE,
    SOURCE,
    TabbyGuest,
    deployed_guest,
)
from support.tabbyapi_standin import OOM_LINE, STARTUP_LINE, StandinRepo, build_standin_repo

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

ODD_REF = "odd-shape"
CONFIG = f"{SOURCE}/config.yml"
# What the verify suite must expect for the test data (TabbyGuest.data); everything else is defaults.toml.
VERIFY_ENV = {"LABWRIGHT_TABBYAPI_MODEL_NAME": MODEL_NAME, "LABWRIGHT_TABBYAPI_CACHE_SIZE": "4096",
              "LABWRIGHT_TABBYAPI_MAX_SEQ_LEN": "4096"}


def add_odd_shape(repo: StandinRepo) -> None:
    """A seed-era commit whose generator call has neither known shape (an upstream refactor), tagged ``odd-shape``."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "checkout", "-q", repo.seed_ref], cwd=repo.path, env=env, check=True, capture_output=True)
    model = repo.path / MODEL_PY
    model.write_text(model.read_text().replace("num_draft_tokens=self.draft_num_tokens,", "draft_tokens=self.n,"))
    ident = ["-c", "user.name=labwright stand-in", "-c", "user.email=standin@labwright.invalid"]
    for args in (["commit", "-qam", "stand-in: a refactored generator call"], ["tag", ODD_REF],
                 ["checkout", "-q", repo.config_ref], ["update-server-info"]):
        subprocess.run(["git", *ident, *args], cwd=repo.path, env=env, check=True, capture_output=True)


def one_line_naming(run: DeployRun, needle: str) -> str:
    hits = [line for line in run.output.splitlines() if needle in line]
    assert hits, f"no line with {needle!r}:\n{run.output[-3000:]}"
    return hits[0]


class Watch:
    """GET /health from this machine every 20 ms while a block runs."""

    def __init__(self, guest: TabbyGuest):
        self.guest = guest
        self.seen: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seen.append(self.guest.health(timeout=2))
            self._stop.wait(0.02)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> StandinStacks:
    return build_standin_stacks(tmp_path_factory.mktemp("stacks"))


@pytest.fixture(scope="module")
def guest(lab: Lab, stacks: StandinStacks, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TabbyGuest]:
    repo = build_standin_repo(tmp_path_factory.mktemp("standin") / "tabbyAPI")
    add_odd_shape(repo)

    def verify_before(g: TabbyGuest) -> None:
        g.before = g.verify(env=VERIFY_ENV)

    with deployed_guest(lab, stacks, repo, "lwtabby", before=verify_before) as g:
        yield g


def back_to_defaults(guest: TabbyGuest) -> None:
    run = guest.deploy()
    assert run.rc == 0, run.output[-3000:]
    assert guest.health() == 200


def test_first_run_installs_and_starts_the_standin_tabbyapi(guest):
    before, first = guest.before, guest.first
    assert before.returncode == 1 and "test_unit_enabled_and_active" in before.stdout, before.stdout[-2000:]
    assert first.rc == 0, first.output[-4000:]
    assert first.totals.changed >= 10 and first.totals.error == 0
    print(f"\nfirst deploy: {first.seconds:.1f}s, {first.totals.changed} changed")
    assert guest.health() == 200
    journal = guest.sh(f"journalctl -u {SERVICE} -o cat --no-pager")
    assert STARTUP_LINE in journal and "Using n-gram drafting with minimum match length 3" in journal
    assert guest.cat(f"{SOURCE}/{MODEL_PY}").count("ngram_match_min=3,") == 1  # seed-era: patched once
    assert guest.readlink().startswith("/opt/labwright/stacks/standin-2.9-")
    assert guest.sh(f"stat -c '%U %G %a' {SOURCE}/api_tokens.yml").split() == ["root", SERVICE, "640"]
    verify = guest.verify(env=VERIFY_ENV)
    assert verify.returncode == 0, verify.stdout[-4000:]


def test_second_run_changes_nothing_and_keeps_the_keys(guest):
    keys = guest.cat(f"{SOURCE}/api_tokens.yml")
    pid = guest.main_pid()
    again = guest.deploy()
    assert again.rc == 0, again.output[-3000:]
    assert again.totals.changed == 0 and again.totals.error == 0, again.output[-3000:]
    print(f"\nno-change re-run: {again.seconds:.1f}s")
    assert guest.main_pid() == pid and guest.cat(f"{SOURCE}/api_tokens.yml") == keys


@pytest.mark.parametrize(("data", "needle"), [
    ({"tabbyapi_model_name": "no-such-model"}, "tabbyapi_model_dir: /srv/models/no-such-model (model_dir/model_nam"),
    ({"tabbyapi_cache_mode": "9,4"}, "tabbyapi_cache_mode: '9,4'"),
    ({"tabbyapi_cache_mode": "8"}, "tabbyapi_cache_mode: '8' is not a cache mode"),
    ({"tabbyapi_ref": "no-such-ref"}, "tabbyapi_ref: 'no-such-ref' does not exist at http://"),
    ({"tabbyapi_port": 5009}, "tabbyapi_port: 5009 is already in use"),
    ({"tabbyapi_draft_model_name": "tiny-draft"}, "tabbyapi_draft_model_name: 'tiny-draft' together with n-gram"),
    ({"stack": "no-such-stack"}, "stack 'no-such-stack' is unknown"),
], ids=["missing-model-dir", "cache-mode-9,4", "cache-mode-8", "missing-ref", "port-in-use", "draft-plus-ngram",
        "unknown-stack"])
def test_bad_input_is_one_line_and_the_standin_service_is_left_as_it_was(guest, data, needle):
    if "tabbyapi_port" in data:
        guest.sh("systemctl is-active -q squatter || systemd-run -q --unit squatter python3 -m http.server 5009 && "
                 "for i in $(seq 50); do ss -Hltn 'sport = :5009' | grep -q . && break; sleep 0.1; done")
    pid, head, config, link = guest.main_pid(), guest.head(), guest.cat(CONFIG), guest.readlink()
    run = guest.deploy(**data)
    assert run.rc != 0
    line = one_line_naming(run, needle)
    assert len(line) < 400, line
    assert "Traceback" not in run.output
    assert (guest.main_pid(), guest.head(), guest.cat(CONFIG), guest.readlink()) == (pid, head, config, link)
    assert guest.health() == 200


def test_cache_size_not_a_multiple_of_256_is_rounded_up_and_said(guest):
    run = guest.deploy(tabbyapi_cache_size=5000)
    assert run.rc == 0, run.output[-3000:]
    assert "tabbyapi_cache_size: 5000 is not a multiple of 256; rounded up to 5120" in run.output
    assert "  cache_size: 5120\n" in guest.cat(CONFIG)
    assert "Loaded model standin-model with cache_size 5120" in guest.sh(f"journalctl -u {SERVICE} -o cat -n 20")
    back_to_defaults(guest)


def test_oom_at_start_is_one_line_naming_cache_size(guest):
    # The stand-in's VRAM: a cache above 2048 tokens does not fit (it logs tabbyAPI's OOM line and exits 1).
    run = guest.deploy(tabbyapi_extra={"standin": {"max_cache_size": 2048}})
    assert run.rc != 0
    line = one_line_naming(run, "out of VRAM at start")
    assert "cache_size 4096" in line and "lower tabbyapi_cache_size" in line and OOM_LINE in line
    assert guest.sh(f"systemctl is-active {SERVICE} || true").strip() in ("inactive", "failed")
    back_to_defaults(guest)


def test_stack_switch_in_data_switches_beside_and_repatches(guest):
    old_link, old_pid = guest.readlink(), guest.main_pid()
    run = guest.deploy(stack="standin-2.10")
    assert run.rc == 0, run.output[-3000:]
    assert guest.readlink().startswith("/opt/labwright/stacks/standin-2.10-") and guest.readlink() != old_link
    assert guest.main_pid() != old_pid and guest.health() == 200
    assert guest.cat(f"{SOURCE}/{MODEL_PY}").count("ngram_match_min=3,") == 1
    again = guest.deploy(stack="standin-2.10")
    assert again.rc == 0 and again.totals.changed == 0, again.output[-3000:]
    back_to_defaults(guest)
    assert guest.readlink() == old_link  # back on the kept 2.9 environment


def test_broken_stack_is_refused_and_the_running_standin_service_untouched(guest):
    link, pid = guest.readlink(), guest.main_pid()
    with Watch(guest) as watch:
        run = guest.deploy(stack="standin-2.10-mislabelled")
    assert run.rc != 0
    line = one_line_naming(run, "refused before the swap")
    assert "standin_attn" in line and "untouched" in line
    assert (guest.readlink(), guest.main_pid()) == (link, pid)
    assert watch.seen and set(watch.seen) == {200}, watch.seen


def test_ref_change_to_config_era_and_back_reapplies_ngram(guest):
    run = guest.deploy(tabbyapi_ref="config-era")
    assert run.rc == 0, run.output[-3000:]
    config = guest.cat(CONFIG)
    assert "  draft_mode: ngram\n  ngram_match_min: 3\n" in config and "  cache_size: 4096\n" in config
    model = guest.cat(f"{SOURCE}/{MODEL_PY}")
    assert "ngram_match_min=self.ngram_match_min" in model and "ngram_match_min=3," not in model
    again = guest.deploy(tabbyapi_ref="config-era")
    assert again.rc == 0 and again.totals.changed == 0, again.output[-3000:]
    back_to_defaults(guest)  # seed-era again: the checkout restores the file, the patch goes back in, once
    assert guest.cat(f"{SOURCE}/{MODEL_PY}").count("ngram_match_min=3,") == 1
    assert "draft_mode:" not in guest.cat(CONFIG)


def test_unrecognised_generator_shape_fails_loudly(guest):
    pid, config = guest.main_pid(), guest.cat(CONFIG)
    run = guest.deploy(tabbyapi_ref=ODD_REF)
    assert run.rc != 0
    line = one_line_naming(run, ANCHOR)
    assert f"{SOURCE}/{MODEL_PY}" in line
    assert guest.cat(CONFIG) == config and guest.main_pid() == pid  # not restarted onto the unknown code
    back_to_defaults(guest)


def test_driver_userspace_checked_against_a_fake_nvidia_host(guest, tmp_path):
    """No GPU here: a fake /proc/driver/nvidia/version + libraries tree stands in for the host driver."""
    for tree, version in (("match", DRIVER_VERSION), ("mismatch", "550.54.15")):
        root = tmp_path / tree
        make_container_libraries(root, version)
        (root / "proc/driver/nvidia").mkdir(parents=True)
        (root / "proc/driver/nvidia/version").write_text(VERSION_TEXT.format(version=DRIVER_VERSION))
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            dest = f"/srv/fake-nvidia-{tree}/{path.relative_to(root).as_posix()}"
            guest.sh(f"mkdir -p {os.path.dirname(dest)}")
            guest.client.push_file(guest.name, dest, path.read_bytes())
    ok = guest.deploy(tabbyapi_nvidia_root="/srv/fake-nvidia-match", tabbyapi_gpu="required")
    assert ok.rc == 0 and ok.totals.changed == 0, ok.output[-3000:]
    assert "NVIDIA userspace = host driver" in ok.output
    verify = guest.verify(env={**VERIFY_ENV, "LABWRIGHT_TABBYAPI_NVIDIA_ROOT": "/srv/fake-nvidia-match"})
    assert verify.returncode == 0, verify.stdout[-3000:]
    # The driver check ran (it skips without a driver tree); the only skip is the engine-on-the-GPU check, which
    # needs a real /dev/nvidiaN this host does not have.
    skipped = [line for line in verify.stdout.splitlines() if line.startswith("SKIPPED")]
    assert all("no /dev/nvidiaN GPU node on this host" in line for line in skipped), skipped
    assert "1 skipped" in verify.stdout or not skipped, verify.stdout[-3000:]
    pid = guest.main_pid()
    bad = guest.deploy(tabbyapi_nvidia_root="/srv/fake-nvidia-mismatch", tabbyapi_gpu="check")
    assert bad.rc != 0 and guest.main_pid() == pid
    line = one_line_naming(bad, "tabbyapi_gpu: driver mismatch")
    assert DRIVER_VERSION in line and "550.54.15" in line
    failing = guest.verify("-k", "test_driver_versions_equal",  # the driver check; the rest passed above
                           env={**VERIFY_ENV, "LABWRIGHT_TABBYAPI_NVIDIA_ROOT": "/srv/fake-nvidia-mismatch"})
    assert failing.returncode == 1 and "test_driver_versions_equal" in failing.stdout



def test_unit_at_its_start_limit_is_restarted_by_the_next_deploy(guest):
    """systemd refuses a unit started too often ("start of the service was attempted too often"); the deploy's
    (re)start resets that first, so the next run serves again instead of failing with the service down."""
    assert guest.sh(f"systemctl show -p StartLimitBurst --value {SERVICE}").strip() == "30"
    guest.sh(f"for i in $(seq 60); do systemctl restart {SERVICE} 2>/dev/null || break; done; "
             f"test \"$(systemctl show -p Result --value {SERVICE})\" = start-limit-hit")
    started = time.monotonic()
    run = guest.deploy()
    assert run.rc == 0, run.output[-3000:]
    assert guest.health() == 200
    print(f"\nserving again {time.monotonic() - started:.1f}s after the re-run started")


def test_stack_changes_back_and_forth_fast_keep_serving(guest):
    """Three stack= changes and back in a row (six restarts within a minute, past systemd's default StartLimitBurst
    of 5): none is refused by the start limit, every run ends serving on the stack it asked for."""
    for _ in range(3):
        for stack, prefix in (("standin-2.10", "standin-2.10-"), (None, "standin-2.9-")):
            run = guest.deploy(**({"stack": stack} if stack else {}))
            assert run.rc == 0, run.output[-3000:]
            assert guest.readlink().startswith(f"/opt/labwright/stacks/{prefix}") and guest.health() == 200
    assert guest.sh(f"systemctl show -p Result --value {SERVICE}").strip() == "success"
