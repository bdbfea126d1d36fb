"""The ELF layer of the ABI verifier, on tiny shared objects compiled here with g++ (no mocks, no venvs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.matrix.demangle import demangle
from labwright.matrix.elfsyms import (
    BrokenElf,
    DynamicInfo,
    cxx11_abi_hint,
    is_torch_symbol,
    nested_name,
    read_dynamic,
)
from support.wheels import compile_shared

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the .so files it reads")

PROVIDER = """
namespace c10 {
int exported_fn(int x) { return x; }
__attribute__((weak)) int weak_fn(int x) { return x + 1; }
__attribute__((visibility("hidden"))) int hidden_fn(int x) { return x + 2; }
static int local_fn(int x) { return x + 3; }
int uses_local(int x) { return local_fn(x); }
int exported_data = 7;
}
extern "C" int c_exported(void) { return 1; }
"""

CONSUMER = """
#include <string>
namespace c10 {
int exported_fn(int);
int gone_fn(long);
void takes_string(const std::string&);
}
extern "C" int c_exported(void);
extern "C" __attribute__((weak)) int optional_hook(void);
extern "C" int PyInit_consumer(void) {
  c10::takes_string("x");
  return c10::exported_fn(1) + c10::gone_fn(2) + c_exported() + (optional_hook ? optional_hook() : 0);
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("elf")
    provider = compile_shared(root / "lib" / "libprovider.so", PROVIDER, soname="libprovider.so")
    consumer = compile_shared(root / "consumer.so", CONSUMER, library_dirs=[root / "lib"], libraries=["provider"],
                              rpath="$ORIGIN/lib", extra=["-Wl,--allow-shlib-undefined"])
    old_abi = compile_shared(root / "old_abi.so", CONSUMER, extra=["-D_GLIBCXX_USE_CXX11_ABI=0"])
    return {"provider": provider, "consumer": consumer, "old_abi": old_abi}


def test_exports_are_defined_global_or_weak_with_default_visibility(built):
    info = read_dynamic(built["provider"])
    assert "_ZN3c1011exported_fnEi" in info.exported
    assert "_ZN3c107weak_fnEi" in info.exported  # weak definitions still satisfy references
    assert "_ZN3c1013exported_dataE" in info.exported  # data, not only functions
    assert "c_exported" in info.exported
    assert not any("hidden_fn" in name or "local_fn" in name for name in info.exported)
    assert info.soname == "libprovider.so"


def test_undefined_symbols_split_strong_and_weak(built):
    info = read_dynamic(built["consumer"])
    assert "_ZN3c1011exported_fnEi" in info.undefined
    assert "_ZN3c107gone_fnEl" in info.undefined
    assert "optional_hook" in info.undefined_weak and "optional_hook" not in info.undefined
    assert "libprovider.so" in info.needed
    assert info.runpath == ["$ORIGIN/lib"]
    assert info.python_init == ["consumer"]
    # Only c10:: names count as torch's, not the C function or libc's.
    assert sorted(info.torch_undefined) == sorted(
        ["_ZN3c1011exported_fnEi", "_ZN3c107gone_fnEl",
         "_ZN3c1012takes_stringERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"])
    assert info.needs_torch


@pytest.mark.parametrize("name", ["provider", "consumer", "old_abi"])
def test_a_read_without_exports_is_the_full_read_less_all_but_pyinit(built, name):
    """What the verifier reads of every .so that is not torch's: the same, but no export other than PyInit_."""
    full, slim = read_dynamic(built[name]), read_dynamic(built[name], exports=False)
    assert slim.exported == [s for s in full.exported if s.startswith("PyInit_")]
    assert slim == DynamicInfo(**{**full.__dict__, "exported": slim.exported})
    assert slim.python_init == full.python_init and slim.needs_torch == full.needs_torch


def test_cxx11_abi_is_read_from_the_symbols_not_the_label(built):
    assert cxx11_abi_hint(read_dynamic(built["consumer"]).torch_undefined) is True
    assert cxx11_abi_hint(read_dynamic(built["old_abi"]).torch_undefined) is False
    assert cxx11_abi_hint(["_ZN3c1011exported_fnEi"]) is None  # nothing string-typed: no verdict
    assert cxx11_abi_hint(["_ZN3c1014version_stringB5cxx11Ev"]) is True  # abi tag on a returned std::string


@pytest.mark.parametrize("name, torch", [
    ("_ZN3c104cuda9SetDeviceEi", True),
    ("_ZNK3c1010TensorImpl5numelEv", True),  # const member
    ("_ZN2at4_ops2qr4callERKNS_6TensorEb", True),
    ("_ZN5torch8autograd12VariableInfoC1Ev", True),
    ("_ZTIN3c105ErrorE", True),  # typeinfo
    ("_ZTVN3c1011StorageImplE", True),  # vtable
    ("_ZN6caffe28TypeMeta12_typeMetaDataIfEEtv", True),
    ("THPVariable_Wrap", True),
    ("aoti_torch_empty_strided", True),
    ("_ZNSt6vectorIiSaIiEE9push_backERKi", False),  # std::
    ("_ZN5boost3fooEv", False),
    ("_ZN3c10x", True),
    ("PyLong_FromLong", False),
    ("memcpy", False),
    ("_ZN4at2xEv", False),  # namespace "at2x" is not at
])
def test_torch_symbol_names(name, torch):
    assert is_torch_symbol(name) is torch


@pytest.mark.parametrize("symbol, expected", [
    ("_ZN3c104cuda9SetDeviceEi", "3c104cuda9SetDevice"),
    ("_ZN3c104cuda9SetDeviceEa", "3c104cuda9SetDevice"),  # same function, other signature
    ("_ZNK3c1010TensorImpl5numelEv", "3c1010TensorImpl5numel"),
    ("_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE", "3c105ErrorC2"),
    ("_ZN3c107gone_fnEl", "3c107gone_fn"),
    ("_Z3fooi", None),  # not nested
    ("_ZN3c106detail17maybe_wrap_dim_slowIlEET_S2_S2_b", None),  # template: no hint rather than a wrong one
    ("memcpy", None),
])
def test_nested_name(symbol, expected):
    assert nested_name(symbol) == expected


def test_demangle_batch():
    names = ["_ZN3c104cuda9SetDeviceEi", "_ZN3c104cuda9SetDeviceEa", "plain_c_name"]
    assert demangle(names) == {
        "_ZN3c104cuda9SetDeviceEi": "c10::cuda::SetDevice(int)",
        "_ZN3c104cuda9SetDeviceEa": "c10::cuda::SetDevice(signed char)",
        "plain_c_name": "plain_c_name",
    }


def test_demangle_without_cxxfilt_keeps_mangled_names(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no c++filt
    assert demangle(["_ZN3c104cuda9SetDeviceEi"]) == {"_ZN3c104cuda9SetDeviceEi": "_ZN3c104cuda9SetDeviceEi"}


def test_not_an_elf_file_is_bad_input(tmp_path):
    text = tmp_path / "fake.so"
    text.write_text("not an ELF file at all")
    with pytest.raises(BadInput, match="fake.so: not an ELF shared object"):
        read_dynamic(text)


def test_cuda_runtime_from_needed():
    assert DynamicInfo(needed=["libc10.so", "libcudart.so.13"]).cuda_runtime_major == 13
    assert DynamicInfo(needed=["libc10.so"]).cuda_runtime_major is None
    assert DynamicInfo(needed=["libtorch_cuda.so"]).needs_torch
    assert not DynamicInfo(needed=["libstdc++.so.6"], undefined=["memcpy"]).needs_torch


def _cut_points(size: int) -> list[int]:
    """Offsets to truncate at: inside the ELF header, the program headers, the middle of the file, the section
    table at the end, and one byte short."""
    return sorted({0, 1, 4, 16, 51, 63, 64, 200, size // 4, size // 2, size - 200, size - 64, size - 1})


@pytest.mark.parametrize("name", ["provider", "consumer"])
def test_a_truncated_shared_object_is_broken_naming_the_file(built, tmp_path, name):
    """What a half-finished install leaves: the file cut short anywhere. Never an ELF parser traceback."""
    whole = built[name].read_bytes()
    for cut in _cut_points(len(whole)):
        torn = tmp_path / f"torn_{cut}.so"
        torn.write_bytes(whole[:cut])
        with pytest.raises(BrokenElf) as caught:
            read_dynamic(torn)
        message = str(caught.value)
        assert message.startswith(f"{torn}: ") and "reinstall the wheel" in message, (cut, message)
        assert "\n" not in message
    (tmp_path / "whole.so").write_bytes(whole)
    assert read_dynamic(tmp_path / "whole.so").exported  # the same bytes, whole, still read


def test_an_empty_file_and_random_bytes_named_so_are_broken(tmp_path):
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    with pytest.raises(BrokenElf, match="empty.so: an empty file"):
        read_dynamic(empty)
    noise = tmp_path / "noise.so"
    noise.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(BrokenElf, match="noise.so: not an ELF shared object"):
        read_dynamic(noise)
