"""labwright.llamacpp.router: the model list, each model's fit, --models-max, the preset and the router's argv.

Router mode as the llama.cpp labwright builds has it (llama-cpp-python 0.3.36's vendor/llama.cpp,
tools/server/README.md "Using multiple models": ``--models-preset`` INI sections with ``model = PATH``,
``--models-max``; tools/server/server.cpp: a server given no model is the router).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyinfra.api.exceptions import DeployError

from labwright.llamacpp import router
from labwright.llamacpp.deploy_data import settings_from
from labwright.llamacpp.tiny_model import write_tiny_gguf
from labwright.models.engine_plan import Memory
from labwright.tuning.units import GIB

A, B = "/srv/models/a.gguf", "/srv/models/b.gguf"


def refusal(data: dict) -> str:
    with pytest.raises(DeployError) as caught:
        router.models_of(data)
    text = str(caught.value)
    assert "\n" not in text and text.startswith("llamacpp_models: ") and text.endswith("(nothing was changed)")
    return text


def test_no_list_is_one_model_as_before():
    assert router.models_of({"llamacpp_model": A}) is None


def test_paths_and_tables_name_the_models():
    assert router.models_of({"llamacpp_models": [A, {"path": B, "name": "chat"}]}) == [
        router.RouterModel("a", A), router.RouterModel("chat", B)]
    assert router.models_of({"llamacpp_models": f"{A}, {B}"}) == [router.RouterModel("a", A),
                                                                  router.RouterModel("b", B)]


@pytest.mark.parametrize(("data", "words"), [
    ({"llamacpp_models": []}, "the list is empty: name at least one GGUF"),
    ({"llamacpp_models": ""}, "the list is empty"),
    ({"llamacpp_models": [A, "/other/a.gguf"]}, "two models are named 'a': /srv/models/a.gguf and /other/a.gguf; "
                                                "give one another name"),
    ({"llamacpp_models": [A, A]}, "(the same file twice)"),
    ({"llamacpp_models": [A, {"path": B, "name": "a"}]}, "two models are named 'a'"),
    ({"llamacpp_models": ["models/a.gguf"]}, "must be an absolute path on the guest"),
    ({"llamacpp_models": ["/srv/a b.gguf"]}, "must be an absolute path on the guest without spaces"),
    ({"llamacpp_models": [{"path": A, "name": "a b"}]}, "'a b' (/srv/models/a.gguf) is not a model name"),
    ({"llamacpp_models": [{"path": A, "alias": "x"}]}, "entry 1 has alias"),
    ({"llamacpp_models": [{"name": "x"}]}, "entry 1 ({'name': 'x'}) names no GGUF"),
    ({"llamacpp_models": {"a": A}}, "is not a list of GGUF paths"),
    ({"llamacpp_models": [A], "llamacpp_model": B}, "llamacpp_model names one model as well"),
    ({"llamacpp_models": [A], "llamacpp_alias": "x"}, "llamacpp_alias names one model as well"),
    ({"llamacpp_models": [A], "model_repo": "org/x"}, "model_repo names one model as well"),
])
def test_bad_lists_are_one_line(data, words):
    assert words in refusal(data)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("m") / "tiny.gguf")


def fit(tiny: Path, memory: Memory, context: int = 4096, cache: str = "q4_0,q4_0", limit: int | None = None):
    head = tiny.read_bytes()[:limit] if limit else tiny.read_bytes()
    return router.fit_one(router.RouterModel("a", A), tiny.stat().st_size, head, memory, context, cache)


def test_the_fit_reads_the_header_and_counts_the_kv(tiny):
    small = fit(tiny, Memory(vram=0, ram=8 * GIB), context=4096)
    large = fit(tiny, Memory(vram=0, ram=8 * GIB), context=65536)
    assert small.fit.verdict == "cpu" and small.fit.weights == tiny.stat().st_size
    assert 0 < small.fit.kv < large.fit.kv
    assert fit(tiny, Memory(vram=24 * GIB, ram=8 * GIB)).fit.verdict == "fits"
    # only the header travels: the rest of the file is a hole of the right length, and the header check holds
    assert fit(tiny, Memory(vram=0, ram=8 * GIB), limit=4096).fit.kv == small.fit.kv


def test_a_model_that_does_not_fit_is_one_line_with_the_fix(tiny):
    with pytest.raises(DeployError) as caught:
        fit(tiny, Memory(vram=0, ram=1024))
    text = str(caught.value)
    assert "\n" not in text and text.startswith("llamacpp_models: a (/srv/models/a.gguf) does not fit on no GPU, RAM ")
    assert "a smaller quant, a smaller cache type or a shorter context" in text and "drop it from the list" in text
    assert "2.55 GiB of it is the engine's overhead: llamacpp_fit_overhead_gb if yours is measured smaller" in text


def test_the_overhead_without_a_list_is_refused():
    with pytest.raises(DeployError, match=r"^llamacpp_fit_overhead_gb: only the fit of llamacpp_models reads it"):
        router.models_of({"llamacpp_model": A, "llamacpp_fit_overhead_gb": 0.5})


def test_the_overhead_counted_per_model_can_be_given():
    tiny_need = router.overhead_of({"llamacpp_fit_overhead_gb": 0.25})
    assert tiny_need == GIB // 4 and router.overhead_of({}) is None
    assert router.overhead_of({"llamacpp_fit_overhead_gb": "auto"}) is None
    for bad in ("lots", -1, True):
        with pytest.raises(DeployError, match=r"^llamacpp_fit_overhead_gb: .* is not auto or a size in GiB"):
            router.overhead_of({"llamacpp_fit_overhead_gb": bad})


def test_a_smaller_overhead_fits_where_the_measured_one_does_not(tiny):
    with pytest.raises(DeployError):
        fit(tiny, Memory(vram=0, ram=GIB), context=131072)
    small = router.fit_one(router.RouterModel("a", A), tiny.stat().st_size, tiny.read_bytes(), Memory(vram=0, ram=GIB),
                           131072, "q4_0,q4_0", overhead=GIB // 10)
    assert small.fit.verdict == "cpu" and small.fit.overhead == GIB // 10


def test_a_sparse_file_larger_than_this_file_system_allows_is_still_read(tiny):
    """The guest's file may be larger than the control machine's file system takes (a 64 TiB hole): the header is
    read all the same, the weights are the guest's size."""
    with pytest.raises(DeployError, match=r"^llamacpp_models: a \(/srv/models/a.gguf\) does not fit on no GPU, RAM "
                                          r"8.00 GiB: needs 65538.57 GiB: more than VRAM 0.00 GiB \+ RAM 8.00 GiB; "):
        router.fit_one(router.RouterModel("a", A), 64 << 40, tiny.read_bytes(), Memory(vram=0, ram=8 * GIB), 4096,
                       "f16,f16")


def test_a_file_that_is_no_gguf_is_named(tiny):
    with pytest.raises(DeployError, match=r"^llamacpp_models: a \(/srv/models/a.gguf\): GGUF /srv/models/a.gguf: "
                                          "not a GGUF file"):
        router.fit_one(router.RouterModel("a", A), 4096, b"PK\x03\x04" + bytes(100), Memory(vram=0, ram=GIB),
                       4096, "f16,f16")


def fake(name: str, verdict: str, need: int) -> router.ModelFit:
    from dataclasses import replace

    from labwright.tuning.fit import check_fit

    base = check_fit(need, 0, overhead=0, fmt="gguf")
    return router.ModelFit(router.RouterModel(name, f"/m/{name}.gguf"), replace(base, verdict=verdict))


def test_models_max_counts_the_largest_that_fit_together():
    fits = [fake("a", "cpu", 3 * GIB), fake("b", "cpu", 2 * GIB), fake("c", "cpu", 1 * GIB)]
    assert router.models_max(fits, Memory(vram=0, ram=5 * GIB)) == (2, "RAM 5.00 GiB")
    assert router.models_max(fits, Memory(vram=0, ram=6 * GIB))[0] == 3
    assert router.models_max(fits, Memory(vram=0, ram=3 * GIB))[0] == 1
    on_gpu = [fake("a", "fits", 3 * GIB), fake("b", "fits", 3 * GIB)]
    assert router.models_max(on_gpu, Memory(vram=7 * GIB, ram=64 * GIB)) == (2, "VRAM 7.00 GiB")
    assert router.models_max(on_gpu, Memory(vram=5 * GIB, ram=64 * GIB)) == (1, "VRAM 5.00 GiB")
    assert router.models_max(fits, Memory(vram=0, ram=None)) == (3, "RAM not known: every model")


def test_the_preset_and_the_router_command_line(tmp_path):
    models = [router.RouterModel("a", A), router.RouterModel("chat", B)]
    preset = router.render_preset(models)
    assert "version = 1" in preset
    assert f"[a]\nmodel = {A}\nload-on-startup = false" in preset and f"[chat]\nmodel = {B}" in preset
    binary = tmp_path / "llama-server"
    binary.write_bytes(b"x")
    s = settings_from({"llamacpp_binary_src": str(binary)})
    argv = router.router_command(s.binary, "/etc/llama-server/models.ini", 2, s.flags, s.extra, s.key_file)
    assert argv[:7] == [s.binary, "--models-preset", "/etc/llama-server/models.ini", "--models-max", "2",
                        "--api-key-file", "/etc/llama-server/api-key"]
    assert "--model" not in argv and "--alias" not in argv and "--ctx-size" in argv and "--port" in argv
    unit = router.render_unit(s, models, 2)
    assert "Description=llama.cpp llama-server (router: a, chat)" in unit
    assert "ExecStart=/usr/local/bin/llama-server --models-preset /etc/llama-server/models.ini --models-max 2" in unit
