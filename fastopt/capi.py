"""fastopt's published C API, seen from Python (docs/embedding.md).

The compiled core exports one table of C entry points in a capsule
(``fastopt._ext._C_API``). C, C++ and Cython extensions reach it through the
header under :func:`get_include` (``#include "fastopt/fastopt_capi.h"``,
``import_fastopt()``) or ``from fastopt.cython_api cimport *``; ctypes and
numba reach it through :func:`addresses` and :func:`ctypes_functions`. The
layout of the table, its structs and its slots is :func:`manifest`.
"""
import ctypes
import functools
import json
import os

from . import _ext

__all__ = ["get_include", "manifest", "table_address", "addresses", "ctypes_structs",
           "ctypes_functions"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_SCALARS = {"int": ctypes.c_int, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64,
            "uint32_t": ctypes.c_uint32, "uint64_t": ctypes.c_uint64,
            "double": ctypes.c_double,
            "const char *": ctypes.c_char_p}


def get_include() -> str:
    """The directory to add to a C/C++/Cython build's include path: it holds
    ``fastopt/fastopt_capi.h``.

    Examples
    --------
    >>> import os, fastopt
    >>> os.path.exists(os.path.join(fastopt.get_include(), "fastopt", "fastopt_capi.h"))
    True
    """
    return os.path.join(_HERE, "include")


@functools.lru_cache(maxsize=None)
def manifest() -> dict:
    """The ABI manifest: the capsule's name, the version, the table's header
    fields, every public struct's fields and every slot's C prototype, in
    table order (generated with the header from one listing)."""
    with open(os.path.join(_HERE, "capi_manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def table_address() -> int:
    """The address of the table the capsule holds (it lives as long as the
    process: a static constant of the compiled core)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return get(_ext._C_API, manifest()["capsule"].encode())


def addresses() -> dict:
    """``{slot name: address}`` of every entry point of the table, e.g. for
    numba's ``ctypes`` support or a JIT.

    Examples
    --------
    >>> import fastopt.capi
    >>> sorted(fastopt.capi.addresses())[:3]
    ['agc', 'agc_momentum', 'clip_grads']
    """
    m = manifest()
    base = table_address() + 4 * len(m["header"])
    base += -base % ctypes.sizeof(ctypes.c_void_p)
    words = (ctypes.c_void_p * len(m["slots"])).from_address(base)
    return {s["name"]: words[i] for i, s in enumerate(m["slots"])}


@functools.lru_cache(maxsize=None)
def ctypes_structs() -> dict:
    """``{struct name: ctypes.Structure}`` of the public structs, laid out
    as the header declares them (set ``size`` to ``ctypes.sizeof``)."""
    out = {}
    for name, fields in manifest()["structs"].items():
        out[name] = type(name, (ctypes.Structure,),
                         {"_fields_": [(n, _ctype(t, out)) for t, n in fields]})
    return out


def _ctype(ctype, structs):
    if ctype.endswith("]"):                 # an array field, T[N]
        base, n = ctype[:-1].split("[")
        return _ctype(base, structs) * int(n)
    if ctype in _SCALARS:
        return _SCALARS[ctype]
    base = ctype.replace("const ", "").replace("*", "").strip()
    if base in structs:
        return ctypes.POINTER(structs[base])
    if base == "float" and ctype.count("*") == 1:
        return ctypes.POINTER(ctypes.c_float)
    if base == "double" and ctype.count("*") == 1:
        return ctypes.POINTER(ctypes.c_double)
    if "*" not in ctype:
        raise TypeError(f"fastopt.capi: no ctypes type for {ctype!r}")
    return ctypes.c_void_p          # every other pointer: an address


def ctypes_functions() -> dict:
    """``{slot name: ctypes function}``: each entry point with its prototype
    (``argtypes``/``restype`` from the manifest; struct pointers as
    ``ctypes.POINTER`` of :func:`ctypes_structs`, other pointers as
    addresses). ctypes releases the GIL for the call."""
    structs = ctypes_structs()
    out = {}
    for slot, addr in zip(manifest()["slots"], addresses().values()):
        proto = ctypes.CFUNCTYPE(_ctype(slot["restype"], structs),
                                 *[_ctype(t, structs) for t in slot["argtypes"]])
        out[slot["name"]] = proto(addr)
    return out
