"""What tools and servers answer, nonsense included, against every parser labwright reads them with.

A fuzz of the tool parsers at 77a5710 found one class of fault in many places: a parser that reads what a tool
printed raised what its caller does not catch (a ValueError out of int() for a `stat: cannot statx` line, a
TypeError for `"tokens": "12"`, an AttributeError for `"hashes": 1`, a KeyError for an async answer without its
operation), or took nonsense for a measurement (other scripts' digits as numbers, a bandwidth of inf, a chip of 0 kB,
a negative node id). Each parser here gets answers derived from a real one (tests/conformance and tests/support/data
samples, each field and line mutated: removed, doubled, swapped, replaced with other scripts' digits, over-long
digit runs, NaN, control characters, whole junk lines) and must either answer with sane values or raise the error
its callers handle (``allowed``). The numbers a parser returns are checked too: ASCII in the answer, finite, not
negative.
"""

from __future__ import annotations

import contextlib
import copy
import glob
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labwright.errors import LabwrightError
from support.hypothesis_budget import examples

TESTS = Path(__file__).resolve().parents[1]
NASTY = ["", " ", "-1", "0", "NaN", "inf", "1e400", "9" * 25, "9" * 5000, "١", "١٢٣", "𝟗", "²", "\x0b", "\xa0",
         "\u2028", "\x85", "\x00", "[N/A]", "0x", "zz", "0xzz", ",", ", ", "=", ":", "(", ")", "{", "}", "[", "]",
         "\n", "null", "true", "[]", "{}", "stat: cannot statx '/dev/dri/x': No such file or directory", "-5", "2.5"]
SEPARATORS = re.compile(r"(\s+|, |,|:|=|\(|\)|\[|\]|/|\.)")
SETTINGS = settings(max_examples=examples(60), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@st.composite
def mutated(draw: Any, sample: str) -> str:
    """``sample`` with 1-4 of its tokens (split at separators) replaced, removed, doubled or swapped, or lines
    replaced, removed or doubled."""
    if draw(st.booleans()):
        return "".join(_edit(draw, SEPARATORS.split(sample), 4, ["nasty", "nasty", "delete", "dup", "text", "swap"]))
    return "\n".join(_edit(draw, sample.splitlines(), 3, ["nasty", "delete", "dup"]))


def _edit(draw: Any, parts: list[str], most: int, ops: list[str]) -> list[str]:
    """``parts`` with 1 to ``most`` of them replaced by junk or text, removed, doubled or swapped (``ops``)."""
    parts = parts or [""]
    for _ in range(draw(st.integers(1, most))):
        if not parts:
            parts = [""]
        i = draw(st.integers(0, len(parts) - 1))
        op = draw(st.sampled_from(ops))
        if op == "nasty":
            parts[i] = draw(st.sampled_from(NASTY))
        elif op == "delete":
            del parts[i]
        elif op == "dup":
            parts.insert(i, parts[i])
        elif op == "text":
            parts[i] = draw(st.text(max_size=6))
        else:
            j = draw(st.integers(0, len(parts) - 1))
            parts[i], parts[j] = parts[j], parts[i]
    return parts


def answers(sample: str) -> st.SearchStrategy[str]:
    return st.one_of(mutated(sample), st.text(max_size=120),
                     st.lists(st.sampled_from(NASTY), max_size=6).map(" ".join))


JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(), st.text(max_size=8),
                      st.sampled_from(NASTY))
JSON_ANY = st.recursive(JSON_LEAF, lambda c: st.one_of(st.lists(c, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), c, max_size=3)),
                        max_leaves=12)


@st.composite
def json_mutated(draw: Any, sample: Any) -> Any:
    """``sample`` with 1-3 of its nodes replaced by generated JSON values, or removed from their object."""
    doc = copy.deepcopy(sample)
    paths: list[tuple[Any, ...]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        paths.append(path)
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in children:
            walk(value, (*path, key))

    walk(doc, ())
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        if not path:
            return draw(JSON_ANY)
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict) and draw(st.booleans()):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(JSON_ANY)
        except (KeyError, IndexError, TypeError):
            continue
    return doc


def sane(value: Any, what: str) -> None:
    """A number read from an answer: a whole or finite number, not negative (bools are not numbers here)."""
    if value is None:
        return
    assert not isinstance(value, bool) and isinstance(value, int | float), (what, value)
    assert math.isfinite(value) and value >= 0, (what, value)


def _conformance(tool: str, *, needs: str = "") -> list[str]:
    found = []
    for path in sorted(glob.glob(str(TESTS / "conformance" / tool / "*.toml"))):
        out = tomllib.loads(Path(path).read_text()).get("run", {}).get("stdout", "")
        if out and needs in out:
            found.append(out)
    return found


SMI = ("@@labwright-smi-fields index,name,uuid,compute_cap,driver_version,memory.total\n@@labwright-smi-exit 0\n"
       "0, NVIDIA GeForce RTX 4090, GPU-7ebe9dba-701a-0edc-92c3-f47050140e7e, 8.9, 580.159.04, 24564 MiB\n"
       "1, NVIDIA GeForce RTX 3090, GPU-1, 8.6, 580.159.04, 24576 MiB\n")
BANDWIDTH = ("@@labwright-smi-fields index,name,memory.total,clocks.max.memory,memory.bus_width\n"
             "@@labwright-smi-exit 0\n0, NVIDIA GeForce RTX 4090, 24564, 10501, 384\n")
VULKANINFO = (TESTS / "support" / "data" / "vulkaninfo" / "radv-renoir-mesa22.txt").read_text()
DRI_GUEST = ("@@labwright-vk-nodes\n/dev/dri/card0 e2 0 44\n/dev/dri/renderD128 e2 80 993\n/dev/kfd ed 0 993\n"
             "@@labwright-vk-vulkan\n" + VULKANINFO[-600:] + "\nexit 0\n")
NVIDIA_GUEST = ("@@labwright-gpu-nodes\n/dev/nvidia0 c3 0\n/dev/nvidiactl c3 ff\n@@labwright-gpu-libs\n"
                "libcuda.so.550.54.14\n@@labwright-gpu-smi\n" + SMI)
ENGINE = ("@@labwright-gpu-pid\n1234\n@@labwright-gpu-fds\n/dev/nvidia0\n@@labwright-gpu-cmdline\nllama-server\n"
          "-ngl\n99\n@@labwright-gpu-ids\nUid:\t999\t999\t999\t999\nGroups:\t44 993\n@@labwright-gpu-log\n"
          "load_tensors: offloaded 33/33 layers to GPU\n")
VULKAN_LOG = ("ggml_vulkan: Found 1 Vulkan devices:\nggml_vulkan: 0 = AMD Radeon Graphics (RADV RENOIR) (radv) | "
              "uma: 1 | fp16: 1\nllama_model_load_from_file_impl: using device Vulkan0 "
              "(AMD Radeon Graphics (RADV RENOIR)) (0000:03:00.0) - 7000 MiB free\n"
              "load_tensors: offloaded 29/29 layers to GPU\n")
DRI_FACTS = ("card0 0x1002 0000:03:00.0 e2 0 660\nrenderD128 0x1002 0000:03:00.0 e2 80 666\n"
             "card1 0x8086 0000:00:02.0 e2 1 660\n@@kfd\ned 0 666\n@@nvidia\n")
NODE_FACTS = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n@@devices\n"
              "Character devices:\n  1 mem\n195 nvidia\n508 nvidia-uvm\n\nBlock devices:\n  8 sd\n@@nodes\n"
              "c3 0 /dev/nvidia0\nc3 ff /dev/nvidiactl\n1fc 0 /dev/nvidia-uvm\n")
CMAP = ("runtime.members.1.config_version (u64) = 4\nruntime.members.1.ip (str) = r(0) ip(10.98.7.1)\n"
        "runtime.members.1.join_count (u32) = 1\nruntime.members.1.status (str) = joined\n")
COROSYNC_LOG = ("May 07 17:39:36 pve7 corosync[1146]:   [KNET  ] rx: Packet rejected from 10.140.3.80:5405\n"
                "Nov 22 07:18:18 vm corosync error   [CMAP  ] Received config version (6) is different than my config "
                "version (4)! Exiting\nMay 07 17:39:43 pve7 corosync[1146]:   [QUORUM] Members[2]: 1 3\n")
COROSYNC_CONF = """totem {
  version: 2
  cluster_name: lab
  config_version: 4
}
nodelist {
  node {
    name: pve1
    nodeid: 1
    quorum_votes: 1
    ring0_addr: 10.98.7.1
  }
}
quorum {
  provider: corosync_votequorum
}
"""
WHEEL = "torch-2.7.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl"
PYPI = {"info": {"name": "torch"}, "releases": {
    "2.7.0": [{"filename": WHEEL, "packagetype": "bdist_wheel", "url": "https://files.example/" + WHEEL,
               "yanked": False, "digests": {"sha256": "ab" * 32}}]}}
SIMPLE = {"meta": {"api-version": "1.1"}, "name": "torch", "files": [
    {"filename": WHEEL, "url": "https://download.example/" + WHEEL, "hashes": {"sha256": "ab" * 32}, "yanked": False}]}
RELEASES = [{"tag_name": "v0.3.1", "draft": False, "prerelease": False, "assets": [
    {"name": WHEEL, "browser_download_url": "https://github.example/" + WHEEL, "digest": "sha256:" + "ab" * 32}]}]


def _gpus(text: str) -> None:
    from labwright.gpu.nvidia.smi import parse_gpu_query

    for gpu in parse_gpu_query(text):
        sane(gpu.index, "index")
        sane(gpu.memory_mib, "memory_mib")


def _bandwidth(text: str) -> None:
    from labwright.tuning.bandwidth import gpus_from_smi
    from labwright.tuning.speed import MAX_BANDWIDTH_GBS

    for gpu in gpus_from_smi(text)[0]:
        sane(gpu.gbs, "gbs")
        sane(gpu.memory_mib, "memory_mib")
        assert gpu.gbs is None or 0 < gpu.gbs <= MAX_BANDWIDTH_GBS, gpu


def _dri_guest(text: str) -> None:
    from labwright.gpu.vulkan import parse_dri_guest

    guest = parse_dri_guest(text)
    for major, minor in guest.nodes.values():
        sane(major, "major")
        sane(minor, "minor")
    assert isinstance(guest.devices, list)


def _nvidia_guest(text: str) -> None:
    from labwright.gpu.check import parse_guest

    for major, minor in parse_guest(text).nodes.values():
        sane(major, "major")
        sane(minor, "minor")


def _engine(text: str) -> None:
    from labwright.gpu.check import parse_engine
    from labwright.gpu.vulkan import parse_vulkan_log

    engine = parse_engine("llama-server", text)
    sane(engine.pid, "pid")
    log = parse_vulkan_log(engine.log)
    if log.offloaded is not None:
        sane(log.offloaded[0], "offloaded")


def _vulkan_log(text: str) -> None:
    from labwright.gpu.check import fallback_reason
    from labwright.gpu.vulkan import parse_summary, parse_vulkan_log

    parse_vulkan_log(text)
    fallback_reason(text)
    for device in parse_summary(text):
        sane(device.index, "device index")


def _dri_facts(text: str) -> None:
    from labwright.gpu.dri import parse_dri_facts

    facts = parse_dri_facts(text)
    facts.describe()
    for device in facts.devices:
        if device.node is not None:
            sane(device.node.major, "major")


def _node_facts(text: str) -> None:
    from labwright.gpu.nvidia.host import parse_node_facts

    for node in parse_node_facts(text).nodes:
        sane(node.major, "major")
        sane(node.minor, "minor")


def _decode(text: str) -> None:
    from labwright.gpu.check import decode_check

    check = decode_check(text, 5.0, "http://127.0.0.1:8001/v1")
    assert not check.ok or ("nan" not in check.detail and "inf" not in check.detail), check


def _quorum(text: str) -> None:
    from labwright.cluster.parse import parse_quorum_status

    status = parse_quorum_status(text)
    for member in status.members if status else ():
        sane(member.nodeid, "nodeid")
        sane(member.votes, "votes")


def _cmap(text: str) -> None:
    from labwright.cluster.parse import cmap_members, parse_cmap

    for nodeid, member in cmap_members(parse_cmap(text)).items():
        sane(nodeid, "nodeid")
        sane(member.config_version, "config_version")


def _corosync_log(text: str) -> None:
    from labwright.cluster.parse import log_signs

    signs = log_signs(text)
    for nodeid in signs.last_members or ():
        sane(nodeid, "member")


def _corosync_conf(text: str) -> None:
    from labwright.cluster.conf import parse_conf

    conf = parse_conf(text)
    sane(conf.config_version, "config_version")
    for node in conf.nodes:
        assert node.nodeid >= 1 and isinstance(node.name, str), node
        sane(node.votes, "votes")


def _flashrom(text: str) -> None:
    from labwright.bios.flashrom import parse_access, parse_chip

    chip = parse_chip(text)
    if chip is not None:
        assert chip.size > 0, chip
    for region in parse_access(text):
        assert 0 <= region["base"] <= region["limit"], region


def _pct(text: str) -> None:
    from labwright.connectors.pct_commands import parse_size_and_sha256, pct_task_warnings

    sane(pct_task_warnings(text), "warnings")
    found = parse_size_and_sha256(text)
    if found is not None:
        sane(found[0], "size")


def _listeners(text: str) -> None:
    from labwright.facts.llamacpp import parse_listeners

    parse_listeners(text.splitlines())


def _pve_props(text: str) -> None:
    from labwright.guests import pve_props

    for fmt in (getattr(pve_props, name) for name in dir(pve_props) if name.isupper()):
        if isinstance(fmt, pve_props.PropFormat):
            pve_props.parse(text, fmt)


TEXT_PARSERS = {
    "nvidia-smi gpus": (_gpus, [SMI]),
    "nvidia-smi bandwidth": (_bandwidth, [BANDWIDTH]),
    "guest dri nodes + vulkaninfo": (_dri_guest, [DRI_GUEST]),
    "guest nvidia nodes": (_nvidia_guest, [NVIDIA_GUEST]),
    "engine state": (_engine, [ENGINE]),
    "vulkan log + summary": (_vulkan_log, [VULKAN_LOG, VULKANINFO[-1500:]]),
    "host dri facts": (_dri_facts, [DRI_FACTS]),
    "host nvidia node facts": (_node_facts, [NODE_FACTS]),
    "timed decode": (_decode, ['{"seconds": 1.5, "tokens": 64}']),
    "corosync-quorumtool": (_quorum, _conformance("corosync", needs="Membership information")[:4]),
    "corosync-cmapctl": (_cmap, [CMAP]),
    "corosync log": (_corosync_log, [COROSYNC_LOG]),
    "corosync.conf": (_corosync_conf, [COROSYNC_CONF]),
    "flashrom": (_flashrom, _conformance("flashrom")[:4]),
    "pct": (_pct, ["4096 " + "ab" * 32 + "\nTask finished with 1 warning(s)!\n"]),
    "llama-server listeners": (_listeners,
                               ['LISTEN 0 512 127.0.0.1:8001 0.0.0.0:* users:(("llama-server",pid=812,fd=3))']),
    "pve property strings": (_pve_props, ["virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1,tag=10",
                                          "/dev/dri/renderD128,gid=993,mode=0660"]),
}


#: What the fuzz at 77a5710 found (each broke its parser then), run every time beside the generated answers.
FOUND = {
    "guest dri nodes + vulkaninfo": ["@@labwright-vk-nodes\nstat: cannot statx '/dev/dri/x': No such file\n",
                                     "@@labwright-vk-nodes\n/dev/dri/card0 e2 \n"],
    "guest nvidia nodes": ["@@labwright-gpu-nodes\n/dev/nvidia0 zz 0\n"],
    "host dri facts": ["card0 0x1002 0000:03:00.0 e2 0 999\n@@kfd\n", "@@kfd\nstat: x y\n"],
    "host nvidia node facts": ["@@devices\n@@nodes\n 0 /dev/nvidia0\n"],
    "timed decode": ["0", "null", "[1]", '{"seconds":1,"tokens":"12"}', '{"seconds":1,"tokens":NaN}',
                     '{"seconds":1,"tokens":1e999}', '{"seconds":NaN,"tokens":12}'],
    "nvidia-smi bandwidth": ["@@labwright-smi-fields index,name,memory.total,clocks.max.memory,memory.bus_width\n"
                             "@@labwright-smi-exit 0\n0, NVIDIA GeForce RTX 4090, " + "9" * 400 + ", 10501, 384\n",
                             "@@labwright-smi-fields index,name,memory.total,clocks.max.memory,memory.bus_width\n"
                             "@@labwright-smi-exit 0\n0, NVIDIA GeForce RTX 4090, 24564, " + "9" * 400 + ", 384\n"],
    "corosync-quorumtool": ["Quorum information\n------------------\nNodes:            ١\n"],
    "corosync log": ["[QUORUM] Members[١]: ٣\n", "[QUORUM] Members[1]: " + "9" * 5000 + "\n",
                     "Received config version (" + "9" * 5000 + ") is different than my config version (1)\n"],
    "corosync.conf": ["totem {\n}\nnodelist {\n  node: pve1\n}\n",
                      "totem {\n}\nnodelist {\n  node {\n    name {\n    }\n  }\n}\n",
                      "totem {\n  config_version: -3\n}\n", "totem {\n}\nnodelist {\n  node {\n    name: a\n"
                      "    nodeid: ١\n  }\n}\n", "totem {\n}\nnodelist {\n  node {\n    name: a\n    nodeid: -1\n"
                      "  }\n}\n"],
    "flashrom": ['Found Winbond flash chip "W25Q128.V" (0 kB, SPI) on dummy.\n',
                 "FREG0: Flash Descriptor region (0x00002000-0x00000fff) is read-write.\n",
                 'Found Winbond flash chip "W25Q128.V" (' + "9" * 5000 + " kB, SPI) on dummy.\n",
                 "FREG" + "9" * 5000 + ": Flash Descriptor region (0x0-0x1) is read-write.\n"],
    "pct": ["Task finished with " + "9" * 5000 + " warning(s)!\n", "9" * 5000 + " " + "ab" * 32 + "\n",
            "١٢ " + "ab" * 32 + "\n"],
    "llama-server listeners": ['LISTEN 0 512 127.0.0.1:8001 0.0.0.0:* users:(("llama-server",pid=' + "9" * 5000
                               + ",fd=3))"],
    "pve property strings": ["current=" + "9" * 5000, "gid=" + "9" * 5000, "memory=١٠٢٤"],
    "vulkan log + summary": ["\nDevices:\nGPU" + "9" * 5000 + ":\n", "load_tensors: offloaded " + "9" * 5000
                             + "/1 layers to GPU\n", "ggml_vulkan: " + "9" * 5000 + " = X (y) | uma: 1\n"],
}


def test_every_parser_has_a_sample():
    assert all(samples for _, samples in TEXT_PARSERS.values()), [k for k, (_, s) in TEXT_PARSERS.items() if not s]


@pytest.mark.parametrize("name", sorted(TEXT_PARSERS))
def test_a_mutated_answer_is_read_sanely_or_refused_as_its_callers_expect(name: str) -> None:
    parse, samples = TEXT_PARSERS[name]
    for sample in samples:  # the real answer itself reads, without a refusal
        parse(sample)
    for text in FOUND.get(name, []):
        with contextlib.suppress(LabwrightError):
            parse(text)

    @SETTINGS
    @given(text=st.one_of(*(answers(sample) for sample in samples)))
    def run(text: str) -> None:
        with contextlib.suppress(LabwrightError):  # the declared refusals (BadInput, UnknownOutput, ConfError, ...)
            parse(text)

    run()


@pytest.mark.parametrize(("text", "parse"), [
    ("0, NVIDIA X, GPU-1, 8.6, 550.1, ١٢٣ MiB\n", "gpus"),
    ("١, NVIDIA X, GPU-1, 8.6, 550.1, 123 MiB\n", "gpus"),
    ("0, NVIDIA X, GPU-1, 8.6, 550.1, " + "9" * 400 + " MiB\n", "gpus"),
])
def test_other_scripts_digits_and_long_runs_are_no_numbers(text: str, parse: str) -> None:
    from labwright.gpu.nvidia.smi import parse_gpu_query

    for gpu in parse_gpu_query("@@labwright-smi-fields index,name,uuid,compute_cap,driver_version,memory.total\n"
                               "@@labwright-smi-exit 0\n" + text):
        assert gpu.memory_mib in (None, 123) and gpu.index in (0, None), gpu
        assert gpu.memory_mib is None or "١" not in text


PYPI_FOUND = [{"releases": {"2.7.0": [{**PYPI["releases"]["2.7.0"][0], "digests": True}]}},
              {"releases": {"9" * 5000: [PYPI["releases"]["2.7.0"][0]]}}]
SIMPLE_FOUND = [{"files": [{**SIMPLE["files"][0], "hashes": 1}]}, {"files": [{**SIMPLE["files"][0], "hashes": [1]}]}]
RELEASES_FOUND = [[{"tag_name": "v1", "assets": True}], [{"tag_name": "v1", "assets": {"a": 1}}]]


@pytest.mark.parametrize("doc", PYPI_FOUND)
def test_pypi_found(doc: Any) -> None:
    test_a_pypi_json_answer_is_read_or_unreachable.hypothesis.inner_test(doc=doc, pre=False)


@pytest.mark.parametrize("doc", SIMPLE_FOUND)
def test_pep691_found(doc: Any) -> None:
    test_a_pep691_answer_is_read_or_a_value_error.hypothesis.inner_test(doc=doc)


@pytest.mark.parametrize("doc", RELEASES_FOUND)
def test_github_found(doc: Any) -> None:
    test_a_github_releases_answer_is_read_or_a_value_error.hypothesis.inner_test(doc=doc, pre=False)


@SETTINGS
@given(doc=st.one_of(json_mutated(PYPI), JSON_ANY), pre=st.booleans())
def test_a_pypi_json_answer_is_read_or_unreachable(doc: Any, pre: bool) -> None:
    from labwright.matrix.registry import Feed, Unreachable, parse_project

    with contextlib.suppress(Unreachable):
        parse_project(doc, Feed("torch", "torch_pypi", "2.6"), {}, pre, "https://pypi.org/pypi/torch/json")


@SETTINGS
@given(doc=st.one_of(json_mutated(SIMPLE), JSON_ANY))
def test_a_pep691_answer_is_read_or_a_value_error(doc: Any) -> None:
    from labwright.matrix.outside import parse_simple

    body = json.dumps(doc, allow_nan=True).encode()
    with contextlib.suppress(ValueError):
        parse_simple(body, "application/vnd.pypi.simple.v1+json", "https://index.example/simple/torch/", "src")


@SETTINGS
@given(doc=st.one_of(json_mutated(RELEASES), JSON_ANY), pre=st.booleans())
def test_a_github_releases_answer_is_read_or_a_value_error(doc: Any, pre: bool) -> None:
    from labwright.matrix.outside import parse_github_releases

    with contextlib.suppress(ValueError):
        parse_github_releases(doc, "src", pre)


@pytest.mark.parametrize("offset", ["x", [None], {"a": 1}, 1e400, -1, 99, 2.9, True])
def test_a_jamba_attention_offset_that_names_no_layer_is_refused(offset: Any, tmp_path: Path) -> None:
    from labwright.errors import BadInput
    from labwright.tuning import kv

    config = {"model_type": "jamba", "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 8,
              "hidden_size": 512, "attn_layer_period": 8, "attn_layer_offset": offset}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config, allow_nan=True))
    with pytest.raises(BadInput, match="attn_layer_offset"):
        kv.read_layout(path)


@pytest.mark.parametrize("alignment", [0, 3, 48, -32, 2**40])
def test_a_gguf_alignment_that_is_no_power_of_two_is_refused(alignment: int, tmp_path: Path) -> None:
    import gguf

    from labwright.errors import BadInput
    from labwright.tuning.kv_gguf import read_tensors

    path = tmp_path / "model.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint64("general.alignment", alignment) if alignment >= 0 else writer.add_int64("general.alignment",
                                                                                            alignment)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(BadInput, match="general.alignment .* power of two"):
        read_tensors(path)
