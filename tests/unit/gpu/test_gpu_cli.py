"""`labwright gpu arch` and the arguments of `gpu check` refused before any daemon is asked (exit 2, one line)."""

from __future__ import annotations

import pytest

from labwright.cli import main, register
from labwright.gpu.check import engine_on_gpu
from labwright.hosts.local import LocalHost


@pytest.fixture(autouse=True)
def _gpu_group():
    register(["gpu"])


def test_arch_names_the_architecture_and_cuda_floor(capsys):
    assert main(["gpu", "arch", "sm_120"]) == 0
    assert capsys.readouterr().out.strip() == ("12.0 (sm_120): Blackwell (RTX 50, RTX PRO 6000); builds need "
                                               "CUDA >= 12.8")


def test_arch_with_a_build_too_old_exits_1_naming_why(capsys):
    assert main(["gpu", "arch", "12.0", "--cuda", "12.6"]) == 1
    err = capsys.readouterr().err
    assert err.strip().endswith("needs CUDA >= 12.8 builds; a CUDA 12.6 build has no kernels for it")
    assert len(err.splitlines()) == 1
    assert main(["gpu", "arch", "8.9", "--cuda", "cu128"]) == 0
    assert "a CUDA cu128 build has kernels for it" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "says"), [
    (["gpu", "arch", "eight"], "compute capability 'eight': not MAJOR.MINOR"),
    (["gpu", "arch", "4.2"], "not in labwright/data/gpu-arch.toml"),
    (["gpu", "arch", "8.6", "--cuda", "twelve"], "CUDA version 'twelve': not MAJOR.MINOR"),
    (["gpu", "check", "llm1", "--host-root", "/"], "No such option: --host-root"),  # tests reach a tree otherwise
    (["gpu", "check", "llm1", "--decode-floor", "-3"], "--decode-floor -3: not a speed"),
    (["gpu", "check", "llm1", "--decode-url", "127.0.0.1:8001"], "--decode-url '127.0.0.1:8001': not an http(s) URL"),
    (["gpu", "check", "llm1", "--decode", "--service", "none"], "--decode times the engine's API"),
    (["gpu", "check", "bad_name!"], "guest 'bad_name!' is not an LXD instance name"),
    (["gpu", "check", "remote:llm1"], "gpu check reads the host's NVIDIA files, so it runs on the LXD host itself"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, says):
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and says in err, err


def test_engine_check_of_the_verify_suites_is_none_on_a_host_without_gpu_nodes():
    assert engine_on_gpu(LocalHost(), "llama-server") is None  # this machine has no /dev/nvidiaN
