"""The pin checker: wheels built for another torch / CUDA / Python are named with what they were built for."""

from __future__ import annotations

import pytest

from labwright.errors import BadInput
from labwright.matrix.check import BROKEN, OK, UNKNOWN, check_requirements, read_requirement_lines
from labwright.matrix.load import load_matrix
from labwright.paths import packaged_matrix_dir

MATRIX_DIR = packaged_matrix_dir()
MJUN = "https://github.com/mjun0812/flash-attention-prebuild-wheels/releases/download"
FA_29 = f"{MJUN}/v0.9.0/flash_attn-2.8.3+cu128torch2.9-cp312-cp312-linux_x86_64.whl"
FA_211 = f"{MJUN}/v0.9.4/flash_attn-2.8.3%2Bcu130torch2.11-cp312-cp312-linux_x86_64.whl"


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(MATRIX_DIR)


def check(matrix, *pins, torch="2.11.0", **kw):
    return check_requirements([(f"argument {i}", p) for i, p in enumerate(pins, 1)], torch, matrix, **kw)


def test_the_seed_mistake_is_named(matrix):
    [verdict] = check(matrix, FA_29)
    assert verdict.status == BROKEN
    assert verdict.line().startswith("flash_attn 2.8.3+cu128torch2.9: built for torch 2.9, not torch 2.11.0")
    assert "use flash_attn-2.8.3+cu128torch2.11-cp312-cp312-linux_x86_64.whl" in verdict.hint


def test_the_fix_passes(matrix):
    assert [v.status for v in check(matrix, FA_211, f"flash_attn @ {FA_211}", "flash-attn==2.8.3+cu130torch2.11",
                                    cuda="13.0", python="3.12")] == [OK, OK, OK]


@pytest.mark.parametrize(
    ("pin", "kw", "problem"),
    [
        ("flash_attn-2.8.3+cu130torch2.10-cp312-cp312-linux_x86_64.whl", {"torch": "2.10.0", "cuda": "12.8"},
         "built for CUDA 13.0, the stack's torch uses CUDA 12.8"),
        (FA_211, {"python": "3.11", "cuda": "13.0"}, "built for cp312, not cp311"),
        ("exllamav3==0.0.37+cu132.torch2.11.0", {"torch": "2.12.0"}, "built for torch 2.11.0, not torch 2.12.0"),
        ("exllamav3-0.0.37+cu128.torch2.9.0-cp312-cp312-linux_x86_64.whl", {"torch": "2.9.1"},
         "built for torch 2.9.0 and its metadata pins torch==2.9.0, not torch 2.9.1"),
        ("torch==2.9.0+cu128", {}, "this is torch 2.9.0+cu128, the stack's torch is 2.11.0"),
        ("causal_conv1d-1.6.2.post1+cu12torch2.10cxx11abiTRUE-cp312-cp312-linux_x86_64.whl", {"torch": "2.11.0+cu130"},
         "built for torch 2.10, not torch 2.11.0+cu130; built for CUDA 12, the stack's torch uses CUDA 13.0"),
        ("flash_attn-2.8.3+cu130torch2.11-cp312-cp312-win_amd64.whl", {}, "built for win_amd64, not linux_x86_64"),
    ],
)
def test_broken_pins_say_what_they_were_built_for(matrix, pin, kw, problem):
    [verdict] = check(matrix, pin, **kw)
    assert verdict.status == BROKEN
    assert problem in verdict.line()


def test_exllamav3_with_its_own_torch_passes(matrix):
    assert check(matrix, "exllamav3==0.0.37+cu132.torch2.11.0", cuda="13.0")[0].status == OK


def test_pure_python_and_non_pins(matrix):
    verdicts = check(matrix, "fla-core==0.6.0", "flash-linear-attention>=0.5.0", "numpy", "fla-core==0.6.0")
    assert [v.status for v in verdicts] == [OK, OK]  # ranges and unpinned names are not pins


def test_unlabelled_compiled_pin_is_unknown_not_ok(matrix):
    [verdict] = check(matrix, "flash-attn==2.8.3")
    assert verdict.status == UNKNOWN and "nothing says which torch" in verdict.line()


def test_cuda_comes_from_a_torch_pin_in_the_same_file(matrix):
    verdicts = check(matrix, "https://download.pytorch.org/whl/cu130/torch-2.11.0%2Bcu130-cp312-cp312-"
                     "manylinux_2_28_x86_64.whl", "flash_attn-2.8.3+cu128torch2.11-cp312-cp312-linux_x86_64.whl")
    assert [v.status for v in verdicts] == [OK, BROKEN]
    assert "the stack's torch uses CUDA 13.0" in verdicts[1].line()


def test_requirements_file_markers_comments_and_includes(matrix, tmp_path):
    (tmp_path / "base.txt").write_text(f"flash_attn @ {FA_29} ; python_version == '3.12'\n")
    req = tmp_path / "requirements.txt"
    req.write_text(
        "# tabbyAPI-style pins, one per Python\n"
        "--extra-index-url https://example.invalid/simple\n"
        f"flash_attn @ {FA_211} ; python_version == '3.12'  # the fix\n"
        f"flash_attn @ {FA_211.replace('cp312', 'cp313')} ; python_version == '3.13'\n"
        f"flash_attn @ {FA_211.replace('linux_x86_64', 'win_amd64')} ; platform_system == 'Windows'\n"
        "-r base.txt\n"
    )
    lines = read_requirement_lines(req)
    assert [origin.rsplit(":", 1)[1] for origin, _ in lines] == ["3", "4", "5", "1"]
    verdicts = check_requirements(lines, "2.11.0", matrix, cuda="13.0", python="3.12")
    assert [(v.origin.rsplit("/", 1)[1], v.status) for v in verdicts] == [
        ("requirements.txt:3", OK), ("base.txt:1", BROKEN)]
    # without --python every line is checked: the 3.13 and Windows wheels also fit torch 2.11
    assert len(check_requirements(lines, "2.11.0", matrix, cuda="13.0")) == 4


def test_bad_inputs(matrix, tmp_path):
    with pytest.raises(BadInput, match="argument 1: '!!flash' is not a requirement"):
        check(matrix, "!!flash")
    # packaging < 26 parses "===" with an empty version (labwright then refuses the version); 26.x refuses the
    # requirement itself: one line naming the input either way
    with pytest.raises(BadInput, match=r"argument 1: ('' in )?'flash-attn===' is not a (version|requirement)"):
        check(matrix, "flash-attn===")
    with pytest.raises(BadInput, match="--torch 'banana' is not a torch version"):
        check(matrix, FA_211, torch="banana")
    with pytest.raises(BadInput, match=r"missing.txt: no such file or directory \(expected a requirements file"):
        read_requirement_lines(tmp_path / "missing.txt")
    with pytest.raises(BadInput, match="is not a wheel file name"):
        check(matrix, "https://example.invalid/flash_attn-notaversion.whl")
