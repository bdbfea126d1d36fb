"""llama.cpp's Vulkan build (labwright.llamacpp.vulkan) and what the deploy makes of ``llamacpp_build: vulkan``
(labwright.llamacpp.deploy_data): the build's cache entry and recipe, the guest's glibc check, the unit's
GGML_VK_VISIBLE_DEVICES, and Ollama's Vulkan backend on an AMD/Intel host.

GGML_VK_VISIBLE_DEVICES: ggml/src/ggml-vulkan/ggml-vulkan.cpp, ggml_vk_instance_init (llama.cpp as vendored in
llama-cpp-python 0.3.36): the variable's numbers, split on commas, are the devices used; without it a
``vk::PhysicalDeviceType::eCpu`` device (Mesa's lavapipe) is never chosen ("If only CPU devices are available, return
without devices"). OLLAMA_VULKAN: ollama envconfig/config.go, v0.12.11 line 208 (``Bool``, off unless set) and
v0.32.15 line 234 (``BoolWithDefault``, on unless set false).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from pyinfra.api.exceptions import DeployError
from tests.support.elf_files import elf_needing_glibc

from labwright.llamacpp import build, buildbox, vulkan
from labwright.llamacpp.deploy_data import (
    BuildChoice,
    ServerFile,
    build_choice,
    glibc_needed,
    glibc_refusal,
    ollama_environment,
    render_ollama_dropin,
    settings_from,
    unit_environment,
)

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A build cache with the CPU binary only."""
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path))
    version = build.cache_dir()
    version.mkdir(parents=True)
    (version / "llama-server").write_bytes(b"cpu build")
    (version / "llama-server.sha256").write_text(hashlib.sha256(b"cpu build").hexdigest() + "\n")  # as the build
    return version


def cache_vulkan(content: bytes = b"vulkan build\0GLIBC_2.34\0GLIBC_2.38\0") -> Path:
    """The Vulkan build's cache entry as build_vulkan_server leaves it."""
    directory = vulkan.vulkan_cache_dir()
    (directory / "bin").mkdir(parents=True)
    (directory / "bin" / "llama-server").write_bytes(content)
    (directory / "manifest.json").write_text(json.dumps({
        "glibc_needed": vulkan.needed_glibc(content),
        "files": {"bin/llama-server": hashlib.sha256(content).hexdigest()}}))
    return directory


def test_vulkan_is_chosen_by_name_only_and_wins_over_nvidia_gpus() -> None:
    assert build_choice({"llamacpp_build": "vulkan"}, None) == BuildChoice("vulkan")
    assert build_choice({"llamacpp_build": "Vulkan"}, [{"index": 0, "compute_cap": "8.6"}]).kind == "vulkan"
    assert build_choice({}, None).kind == "cpu"  # auto never picks it: CPU and CUDA builds unchanged
    assert BuildChoice("vulkan").describe() == "Vulkan build (Debian 13)"


def test_a_vulkan_build_not_built_yet_names_the_command(cache: Path) -> None:
    with pytest.raises(DeployError) as error:
        settings_from({"llamacpp_build": "vulkan"})
    message = str(error.value)
    assert "\n" not in message and message.startswith("llamacpp_build: vulkan: ")
    assert "`labwright build llamacpp --vulkan`" in message and "nothing was changed" in message


def test_the_vulkan_build_is_pushed_from_its_cache_with_its_runtime_and_device(cache: Path) -> None:
    cache_vulkan()
    s = settings_from({"llamacpp_build": "vulkan", "llamacpp_vulkan_device": 0})
    assert s.build.kind == "vulkan" and [f.dest for f in s.files] == ["/usr/local/bin/llama-server"]
    assert s.binary_sha256 == hashlib.sha256(b"vulkan build\0GLIBC_2.34\0GLIBC_2.38\0").hexdigest()
    assert s.runtime_packages == ["libgomp1", "libvulkan1", "mesa-vulkan-drivers"]
    unit = s.render_unit()
    assert 'Environment="GGML_VK_VISIBLE_DEVICES=0"' in unit
    assert unit.index("Environment=") < unit.index("ExecStart=")
    # the device and the offloaded layers are logged only at verbosity 4: gpu check reads them from the journal
    assert s.exec_start.endswith(" --log-verbosity 4") and s.extra == ["--log-verbosity", "4"]
    # auto: llama.cpp chooses (GPUs only), nothing in the unit
    auto = settings_from({"llamacpp_build": "vulkan"})
    assert "Environment=" not in auto.render_unit() and auto.environment == ()
    mine = settings_from({"llamacpp_build": "vulkan", "llamacpp_extra_args": ["-lv", "5"]})
    assert mine.extra == ["-lv", "5"]
    assert "--log-verbosity" not in settings_from({}).exec_start  # the CPU build's line is unchanged


def test_cpu_and_cuda_units_have_no_environment(cache: Path) -> None:
    s = settings_from({})
    assert s.environment == () and "Environment=" not in s.render_unit()
    assert s.runtime_packages == ["libgomp1"]
    assert unit_environment(BuildChoice("cuda", ("86-real",)), "auto") == {}
    assert unit_environment(BuildChoice("vulkan"), "0,1") == {"GGML_VK_VISIBLE_DEVICES": "0,1"}


def test_a_damaged_vulkan_cache_never_reaches_a_guest(cache: Path) -> None:
    directory = cache_vulkan()
    (directory / "bin" / "llama-server").write_bytes(b"truncated")
    with pytest.raises(DeployError, match=r"^llamacpp_build: .*the cache is damaged; remove"):
        settings_from({"llamacpp_build": "vulkan"})


@pytest.mark.parametrize(("given", "wanted"), [("auto", "auto"), (0, "0"), ("0", "0"), ("0, 1", "0,1"), ("02", "2")])
def test_the_vulkan_device_is_auto_or_vulkaninfo_indexes(cache: Path, given: object, wanted: str) -> None:
    cache_vulkan()
    s = settings_from({"llamacpp_build": "vulkan", "llamacpp_vulkan_device": given})
    assert dict(s.environment).get("GGML_VK_VISIBLE_DEVICES", "auto") == wanted


@pytest.mark.parametrize(("data", "message"), [
    ({"llamacpp_build": "vulkan", "llamacpp_vulkan_device": "lavapipe"},
     r"^llamacpp_vulkan_device: .*'lavapipe' is not auto or vulkaninfo's device index"),
    ({"llamacpp_build": "vulkan", "llamacpp_vulkan_device": -1}, r"^llamacpp_vulkan_device: .*'-1' is not auto"),
    ({"llamacpp_build": "vulkan", "llamacpp_vulkan_device": True}, r"^llamacpp_vulkan_device: "),
    ({"llamacpp_build": "vulkan", "llamacpp_vulkan_device": [0]}, r"^llamacpp_vulkan_device: "),
    ({"llamacpp_vulkan_device": 0}, r"^llamacpp_vulkan_device: 0: only the Vulkan build reads it; set "
                                    r"llamacpp_build=vulkan"),
])
def test_a_bad_vulkan_device_is_one_line_naming_the_key(cache: Path, data: dict, message: str) -> None:
    cache_vulkan()
    with pytest.raises(DeployError) as error:
        settings_from(data)
    assert re.search(message, str(error.value)) and "\n" not in str(error.value)


def test_a_guest_older_than_the_build_s_glibc_is_refused_in_one_line(tmp_path: Path) -> None:
    """The Vulkan build's own fix (a Debian 13 guest, or the CPU build); the check itself, for every build, is
    tests/unit/llamacpp/test_glibc_refusal.py."""
    elf_needing_glibc(tmp_path / "llama-server", "2.38")
    needed = glibc_needed([ServerFile(str(tmp_path / "llama-server"), "/usr/local/bin/llama-server", "")])
    message = glibc_refusal(BuildChoice("vulkan"), needed, "glibc 2.36", "@lxd/lw-old")
    assert message is not None and "\n" not in message
    assert message.startswith("llamacpp_build: vulkan: ") and "needs glibc 2.38" in message
    assert "@lxd/lw-old has glibc 2.36" in message and "Debian 13" in message and "llamacpp_build=cpu" in message
    assert glibc_refusal(BuildChoice("vulkan"), needed, None, "@lxd/musl") is not None  # no glibc at all
    assert glibc_refusal(BuildChoice("vulkan"), needed, "glibc 2.41", "@lxd/trixie") is None
    assert glibc_refusal(BuildChoice("vulkan"), needed, "glibc 2.38", "@lxd/trixie") is None


def test_the_needed_glibc_is_the_newest_symbol_version() -> None:
    assert vulkan.needed_glibc(b"\0GLIBC_2.2.5\0GLIBC_2.38\0GLIBC_2.14\0GLIBC_PRIVATE\0") == "2.38"
    with pytest.raises(Exception, match="no GLIBC_ symbol version"):
        vulkan.needed_glibc(b"static")


def test_the_toolchain_record_and_os_release() -> None:
    text = "glibc 2.41\ncmake 3.31.6-2\nlibvulkan-dev 1.4.309.0-1\nglslc 2025.2-1\n"
    assert vulkan.parse_toolchain(text) == {"glibc": "2.41", "packages": {
        "cmake": "3.31.6-2", "libvulkan-dev": "1.4.309.0-1", "glslc": "2025.2-1"}}
    assert vulkan.debian_major('PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nVERSION_ID="13"\nID=debian\n') == 13
    assert vulkan.debian_major('ID=debian\nVERSION_ID="12"\n') == 12
    assert vulkan.debian_major('ID=ubuntu\nVERSION_ID="24.04"\n') is None
    assert vulkan.debian_major('ID=debian\nPRETTY_NAME="Debian GNU/Linux trixie/sid"\n') is None


def test_the_recipe_installs_the_box_list_s_packages_with_the_vulkan_flag() -> None:
    """scripts/apt/box/llama-vulkan.list and BUILD_PACKAGES name the same packages, and the box recipe
    (data/llama-box-build.sh) installs the packages it is given."""
    script = buildbox.script_text().decode()
    assert re.search(r'for pkg in \$packages; do', script)
    listed = [line.split()[1] for line in (REPO / "scripts/apt/box/llama-vulkan.list").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert set(listed) == set(vulkan.BUILD_PACKAGES)
    assert vulkan.VULKAN_FLAGS == ("-DGGML_VULKAN=ON",)
    assert vulkan.trixie_recipe().suite == "trixie"


def test_ollama_gets_its_vulkan_backend_and_the_device_on_an_amd_intel_host() -> None:
    plain = ollama_environment({})
    assert "OLLAMA_VULKAN" not in plain and "GGML_VK_VISIBLE_DEVICES" not in plain
    env = ollama_environment({}, vulkan=True)
    assert env["OLLAMA_VULKAN"] == "1" and "GGML_VK_VISIBLE_DEVICES" not in env
    chosen = ollama_environment({"llamacpp_vulkan_device": "1"}, vulkan=True)
    assert chosen["GGML_VK_VISIBLE_DEVICES"] == "1"
    dropin = render_ollama_dropin(chosen, ["video", "render"])
    assert 'Environment="OLLAMA_VULKAN=1"' in dropin and 'Environment="GGML_VK_VISIBLE_DEVICES=1"' in dropin
    assert "SupplementaryGroups=video render\n" in dropin
    assert "SupplementaryGroups" not in render_ollama_dropin(plain)
    with pytest.raises(DeployError, match=r"^llamacpp_vulkan_device: "):
        ollama_environment({"llamacpp_vulkan_device": "gpu0"}, vulkan=True)
