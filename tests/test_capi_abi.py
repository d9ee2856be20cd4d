"""The published C API's ABI: the capsule, read with ctypes, against the ABI
manifest (name, versions, table size, struct sizes, slot order); the
manifest against the core's tables; the generated files against their
generator; the installed package's files; the extension's exported symbols."""
import ctypes as ct
import os
import shutil
import subprocess
import sys

import pytest

import fastopt
import fastopt.capi as capi
from fastopt import _dtypes, _ext, _rules

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M = capi.manifest()


def _header_words():
    n = len(M["header"])
    return dict(zip(M["header"], (ct.c_uint32 * n).from_address(capi.table_address())))


def test_capsule_name_and_versions():
    name = ct.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ct.c_char_p, [ct.py_object]
    assert name(_ext._C_API).decode() == M["capsule"] == "fastopt._ext._C_API"
    h = _header_words()
    assert (h["abi_major"], h["abi_minor"]) == (M["abi_major"], M["abi_minor"])


def test_table_size_and_struct_sizes():
    h = _header_words()
    header = 4 * len(M["header"])
    header += -header % ct.sizeof(ct.c_void_p)
    assert h["table_size"] == header + ct.sizeof(ct.c_void_p) * len(M["slots"])
    for name, cls in capi.ctypes_structs().items():
        assert h["sizeof_" + name[len("fastopt_"):]] == ct.sizeof(cls), name
        assert cls._fields_[0][0] == "size"


def test_slot_order():
    """Every slot is filled and answers as the slot of its name does."""
    addr = capi.addresses()
    assert list(addr) == [s["name"] for s in M["slots"]] and all(addr.values())
    f = capi.ctypes_functions()
    assert f["version"]().decode() == fastopt.__version__
    assert f["isa_active"]().decode() == fastopt.config()["isa_active"]
    assert f["default_threads"]() >= 1
    fields = sorted((v, k) for k, v in M["constants"].items() if k.startswith("FASTOPT_FIELD_"))
    assert [f["field_name"](v).decode() for v, _ in fields] == [
        k[len("FASTOPT_FIELD_"):] for _, k in fields]


def test_manifest_numbers_are_the_tables():
    c = M["constants"]
    for i, row in enumerate(_dtypes.DTYPES):
        assert c["FASTOPT_" + row.name] == i
    assert [k for k in c if k.startswith("FASTOPT_RULE_")] == [
        "FASTOPT_RULE_" + name.upper() for name in _rules.ID]
    for name, i in _rules.ID.items():
        assert c["FASTOPT_RULE_" + name.upper()] == i


def _generator():
    """src_c/gen_capi.py, imported (skips where src_c/ is not next to tests/)."""
    gen = os.path.join(ROOT, "src_c", "gen_capi.py")
    if not os.path.exists(gen):
        pytest.skip("src_c/ is not next to the tests")
    sys.path.insert(0, os.path.dirname(gen))
    try:
        import gen_capi
    finally:
        sys.path.pop(0)
    return gen_capi


def test_generated_files_equal_the_generator():
    gen_capi = _generator()
    here = os.path.dirname(os.path.abspath(fastopt.__file__))
    for path, text in gen_capi.outputs().items():
        installed = os.path.join(here, os.path.relpath(path, os.path.join(ROOT, "fastopt")))
        with open(installed, encoding="utf-8") as f:
            assert f.read() == text, installed


def test_the_package_ships_the_header_pxd_and_manifest():
    here = os.path.dirname(os.path.abspath(fastopt.__file__))
    for rel in ("include/fastopt/fastopt_capi.h", "cython_api.pxd", "capi_manifest.json"):
        assert os.path.isfile(os.path.join(here, rel)), rel
    assert os.path.isfile(os.path.join(fastopt.get_include(), "fastopt", "fastopt_capi.h"))


def test_the_extension_exports_its_init_symbol_only():
    nm = shutil.which("nm")
    if nm is None or not sys.platform.startswith("linux"):
        pytest.skip("needs GNU nm (Linux)")
    out = subprocess.run([nm, "-D", "--defined-only", _ext.__file__], capture_output=True,
                         text=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert names == ["PyInit__ext"]


def test_a_later_minor_versions_slot_is_hidden_below_its_target(monkeypatch):
    gen_capi = _generator()
    monkeypatch.setattr(gen_capi, "SLOTS", gen_capi.SLOTS + [
        ("later", 1, "int", [("int", "a")], "a slot of version 1.1")])
    text = "\n".join(gen_capi.header())
    guard = "#if FASTOPT_CAPI_TARGET_MINOR >= 1\n"
    assert guard + "    int (*later)(int a);" in text
    assert guard + "#define fastopt_later(a) (fastopt_api->later(a))" in text
    assert [s["name"] for s in gen_capi.manifest()["slots"]][-1] == "later"
