"""Listings -> wheels_matrix TOML: each listing kind, bad listings, and that the committed files are regenerable."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.matrix.load import load_matrix, wheels_from_rows
from labwright.matrix.refresh import (
    Listed,
    guess_kind,
    parse_pip_index,
    parse_prebuilt_markdown,
    parse_wheel_list,
    refresh,
    wheel_from_listed,
)
from labwright.paths import packaged_matrix_dir

REPO = Path(__file__).resolve().parents[3]
MATRIX = packaged_matrix_dir()
BASE = "https://github.com/mjun0812/flash-attention-prebuild-wheels/releases/download"

PREBUILT = f"""# Packages
## Linux x86_64
### Flash-Attention 2.8.3
| Python | PyTorch | CUDA | package |
| ------ | ------- | ---- | ------- |
| 3.12 | 2.11 | 13.0 | [Download1(v0.9.4)]({BASE}/v0.9.4/flash_attn-2.8.3+cu130torch2.11-cp312-cp312-linux_x86_64.whl) |
| 3.12 | 2.9 | 12.8 | [Download1(v0.9.0)]({BASE}/v0.9.0/flash_attn-2.8.3+cu128torch2.9-cp312-cp312-linux_x86_64.whl), \
[Download2(v0.7.16)]({BASE}/v0.7.16/flash_attn-2.8.3+cu128torch2.9-cp312-cp312-linux_x86_64.whl) |
| 3.12 | 2.10 | 12.8 | [Download1(v0.9.0)]({BASE}/v0.9.0/flash_attn-2.8.3+cu128torch2.9-cp312-cp312-win_amd64.whl) |
"""


@pytest.fixture(scope="module")
def components():
    return load_matrix(MATRIX).components


def test_prebuilt_markdown_keeps_every_link_with_its_release():
    listed, warnings = parse_prebuilt_markdown(PREBUILT)
    assert [x.release for x in listed] == ["v0.9.4", "v0.9.0", "v0.7.16", "v0.9.0"]
    assert all(x.source == "mjun0812/flash-attention-prebuild-wheels" for x in listed)
    # the last row says torch 2.10 but links a torch2.9 file: reported, not silently trusted
    assert warnings == ["line 8: table says torch 2.10, file name says 2.9"]


def test_prebuilt_markdown_without_links_is_bad_input():
    with pytest.raises(BadInput, match="no \\[DownloadN"):
        parse_prebuilt_markdown("# Packages\n| a | b |\n")


def test_pip_index_html_resolves_relative_links_and_reads_sha256():
    digest = "ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
    html = f"""<html><body>
      <a href="torch-2.11.0%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl#sha256={digest}">x</a>
      <a href="/whl/cu130/torch-2.11.0%2Bcu130-cp313-cp313-manylinux_2_28_x86_64.whl">y</a>
      <a href="torch-2.11.0.tar.gz">sdist</a>
    </body></html>"""
    listed = parse_pip_index(html, "https://download.pytorch.org/whl/cu130/torch/", source="download.pytorch.org")
    assert [x.url for x in listed] == [
        "https://download.pytorch.org/whl/cu130/torch/torch-2.11.0%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl",
        "https://download.pytorch.org/whl/cu130/torch-2.11.0%2Bcu130-cp313-cp313-manylinux_2_28_x86_64.whl",
    ]
    assert listed[0].sha256 == "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
    assert listed[1].sha256 == ""


def test_pip_index_without_wheels_is_bad_input():
    with pytest.raises(BadInput, match="no <a href"):
        parse_pip_index("<a href='x.tar.gz'>x</a>")


def test_wheel_list_directives_words_and_notes():
    text = """# a comment
# source: example/builds
# base-url: https://example.invalid/wheels
flash_attn-2.8.3+cu130torch2.11-cp312-cp312-linux_x86_64.whl release=v1 sha256=""" + "a" * 64 + """
https://other.invalid/x/flash_attn-2.8.3+cu128torch2.9-cp312-cp312-linux_x86_64.whl#sha256=""" + "B" * 64 + """ \
source=someone note=rebuilt by hand, twice

"""
    listed = parse_wheel_list(text)
    assert listed[0] == Listed(
        url="https://example.invalid/wheels/flash_attn-2.8.3+cu130torch2.11-cp312-cp312-linux_x86_64.whl",
        sha256="a" * 64, source="example/builds", release="v1", note="")
    assert listed[1].url.startswith("https://other.invalid/x/")
    assert listed[1].sha256 == "b" * 64 and listed[1].source == "someone"
    assert listed[1].note == "rebuilt by hand, twice"


def test_wheel_list_rejects_unknown_words():
    with pytest.raises(BadInput, match="line 1: 'colour=red' is not key=value"):
        parse_wheel_list("x-1.0-py3-none-any.whl colour=red\n")


def test_rows_carry_what_the_label_says(components):
    row = wheel_from_listed(Listed(f"{BASE}/v0.9.4/flash_attn-2.8.3+cu130torch2.11-cp312-cp312-linux_x86_64.whl",
                                   source="s", release="v0.9.4"), components)
    assert not isinstance(row, str)
    assert (row.package, row.torch, row.cuda, row.cxx11_abi, row.python) == ("flash-attn", "2.11", "13.0", "", "cp312")


def test_exllamav3_rows_pin_their_build_torch_since_0_0_32(components):
    def row(version: str):
        url = f"https://x.invalid/exllamav3-{version}+cu128.torch2.9.0-cp312-cp312-linux_x86_64.whl"
        result = wheel_from_listed(Listed(url), components)
        assert not isinstance(result, str)
        return result

    assert row("0.0.37").requires_torch == "==2.9.0"
    assert row("0.0.31").requires_torch == ""
    assert row("0.0.37").torch_build == "2.9.0"


def test_torch_rows_use_the_cxx11_abi_from_2_7(components):
    new = wheel_from_listed(Listed("https://x.invalid/torch-2.9.0%2Bcu128-cp312-cp312-manylinux_2_28_x86_64.whl"),
                            components)
    old = wheel_from_listed(Listed("https://x.invalid/torch-2.6.0%2Bcu124-cp312-cp312-linux_x86_64.whl"), components)
    assert not isinstance(new, str) and not isinstance(old, str)
    assert (new.cxx11_abi, new.torch, new.cuda) == ("TRUE", "", "12.8")
    assert old.cxx11_abi == ""


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://x.invalid/causal_conv1d-1.6.2.post1+cu13torch25.11cxx11abiTRUE-cp312-cp312-linux_x86_64.whl",
         "NVIDIA container 25.11"),
        ("https://x.invalid/exllamav2-0.3.2+rocm6.4.torch2.9.0-cp312-cp312-linux_x86_64.whl", "ROCm"),
        ("https://x.invalid/flash_attn-2.8.3.tar.gz", "is not a wheel file name"),
    ],
)
def test_rows_that_are_skipped_say_why(components, url, why):
    result = wheel_from_listed(Listed(url), components)
    assert isinstance(result, str) and why in result


def test_bad_sha256_is_skipped(components):
    result = wheel_from_listed(Listed("https://x.invalid/fla_core-0.6.0-py3-none-any.whl", sha256="xyz"), components)
    assert isinstance(result, str) and "not 64 hex digits" in result


def test_refresh_writes_loadable_toml_and_dedups(tmp_path, components):
    listing = tmp_path / "mini.md"
    listing.write_text(PREBUILT + PREBUILT)  # every link twice
    report = refresh(listing, tmp_path, components)
    assert report.path == tmp_path / "mini.toml"
    data = tomllib.loads(report.path.read_text())
    assert data["kind"] == "flash-attn-prebuilt" and data["count"] == 4
    wheels = wheels_from_rows(data["wheels"], "mini.toml")
    assert sorted(w.release for w in wheels) == ["v0.7.16", "v0.9.0", "v0.9.0", "v0.9.4"]


def test_refresh_dry_run_writes_nothing(tmp_path, components):
    listing = tmp_path / "mini.md"
    listing.write_text(PREBUILT)
    report = refresh(listing, tmp_path, components, dry_run=True)
    assert len(report.wheels) == 4 and not report.path.exists()


def test_refresh_refuses_missing_listing_and_reserved_names(tmp_path, components):
    with pytest.raises(BadInput, match=r"nope.md: no such file or directory \(expected a wheel listing \(--from"):
        refresh(tmp_path / "nope.md", tmp_path, components)
    listing = tmp_path / "mini.md"
    listing.write_text(PREBUILT)
    with pytest.raises(BadInput, match="--name 'stacks'"):
        refresh(listing, tmp_path, components, name="stacks")
    with pytest.raises(BadInput, match="--kind 'csv' is unknown"):
        refresh(listing, tmp_path, components, kind="csv")


def test_guess_kind():
    assert guess_kind(Path("a.md")) == "flash-attn-prebuilt"
    assert guess_kind(Path("cu130.HTML")) == "pip-index"
    assert guess_kind(Path("torch.txt")) == "wheel-list"


@pytest.mark.parametrize("source", sorted(p.name for p in (MATRIX / "sources").iterdir()))
def test_committed_matrix_is_what_refresh_generates(tmp_path, components, source):
    """The generated files are committed: re-running refresh on each listing must reproduce them byte for byte."""
    listing = tmp_path / "sources" / source
    listing.parent.mkdir()
    listing.write_bytes((MATRIX / "sources" / source).read_bytes())
    report = refresh(listing, tmp_path, components)
    committed = MATRIX / report.path.name
    assert committed.is_file(), f"{committed.name} is missing: run labwright matrix refresh --from sources/{source}"
    assert report.path.read_text() == committed.read_text(), f"{committed.name} is stale: re-run refresh"
