"""The listing of fastopt's published C API, and the generator of its three
outputs: the C header ``fastopt/include/fastopt/fastopt_capi.h``, the Cython
declarations ``fastopt/cython_api.pxd`` and the ABI manifest
``fastopt/capi_manifest.json``.

    python src_c/gen_capi.py            # rewrite the three files
    python src_c/gen_capi.py --check    # exit 1 if one differs

The outputs are committed; ``tests/test_capi_abi.py`` asserts they equal
what this script writes. Rule, element-type, flag and mode numbers are read
from the core's own headers (``src_c/tables.h``, ``src_c/fastopt.h``), so no
number is kept by hand in two places. Slots and struct fields are
append-only: a new one goes at the end with the minor version it came in.
"""
from __future__ import annotations

import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "fastopt", "include", "fastopt", "fastopt_capi.h")
PXD = os.path.join(ROOT, "fastopt", "cython_api.pxd")
MANIFEST = os.path.join(ROOT, "fastopt", "capi_manifest.json")

MAJOR, MINOR = 1, 1
CAPSULE = "fastopt._ext._C_API"

ERRORS = [("OK", 0, "success"),
          ("ENOMEM", -1, "out of memory"),
          ("EINVAL", -2, "an invalid argument (the result names it)"),
          ("EUNSUPPORTED", -4, "not supported by this runtime (a retired slot, "
                               "a flag or a newer struct field it does not know)")]
# public name -> the core's macro whose value it takes (src_c/fastopt.h)
FROM_CORE = [("NESTEROV", "FO_STEP_NESTEROV"), ("AMSGRAD", "FO_STEP_AMSGRAD"),
             ("MAXIMIZE", "FO_STEP_MAXIMIZE"), ("CENTERED", "FO_STEP_CENTERED"),
             ("CLIP_NONE", "FO_CLIP_NONE"), ("CLIP_TORCH", "FO_CLIP_TORCH"),
             ("CLIP_OPTAX", "FO_CLIP_OPTAX"), ("NORM_2", "FO_NORM_2"),
             ("NORM_INF", "FO_NORM_INF"), ("NORM_SUMSQ", "FO_NORM_SUMSQ"),
             ("MEASURE_NEEDED", "FO_MEASURE_NEEDED"), ("MEASURE_ALWAYS", "FO_MEASURE_ALWAYS"),
             ("MEASURE_GIVEN", "FO_MEASURE_GIVEN"), ("AGC_ROWS", "FO_AGC_ROWS"),
             ("AGC_COLS", "FO_AGC_COLS"),
             ("ROUND_NEAREST", "FO_STEP_ROUND_NEAREST"),             # 1.1
             ("ROUND_STOCHASTIC", "FO_STEP_ROUND_STOCHASTIC")]       # 1.1
# the states' storage of a tensor (fastopt_tensor.states, 1.1)
STATES = [("OWN", "the parameters' dtype"),
          ("BF16", "bfloat16, for float32 parameters (rounded as the group's flags say)")]
# where an invalid argument is (fastopt_result.error_where)
WHERES = ["CALL", "TENSOR", "GROUP", "OPTS", "RESULT"]
# which field of it (fastopt_result.error_field; field_name() spells it); for a
# pointer field: NULL where an array is needed, misaligned, or overlapping a
# buffer the call writes
FIELDS = ["NONE", "SIZE", "FLAGS", "COUNT", "X", "G", "S1", "S2", "S3", "W", "V", "N",
          "DTYPE", "GDTYPE", "WDTYPE", "GROUP", "RULE", "T", "HYPER", "GRAD_SCALE",
          "MAX_NORM", "CLIP_VALUE", "CLIP", "NORM_TYPE", "MEASURE", "EPS", "UNITS",
          "KIND", "CLIPPING", "STATES"]

# (name, doc, fields (ctype, name, comment)); each starts with the caller-set size
STRUCTS = [
    ("fastopt_tensor", "One tensor of a step: x updated in place, g only read, the states "
     "s1..s3 as the rule needs (NULL otherwise), n elements each; w (optional) receives the "
     "new x rounded to wdtype.",
     [("uint32_t", "size", "sizeof(fastopt_tensor) as the caller compiled it"),
      ("uint32_t", "flags", "0 in v1 (reserved for 8-bit states)"),
      ("void *", "x", ""), ("const void *", "g", ""), ("void *", "s1", ""),
      ("void *", "s2", ""), ("void *", "s3", ""), ("void *", "w", ""),
      ("int64_t", "n", "elements of each array"),
      ("int32_t", "dtype", "FASTOPT_F32 ... of x and the states"),
      ("int32_t", "gdtype", "of g: dtype, or a 16-bit type for F32/F64"),
      ("int32_t", "wdtype", "of w (with w)"),
      ("int32_t", "group", "index into the groups"),
      ("int32_t", "states", "1.1: FASTOPT_STATES_* (0: x's dtype)"),
      ("int32_t", "reserved", "0"),
      ("uint64_t", "key", "1.1: the stochastic rounding key of bfloat16 states")]),
    ("fastopt_group", "The rule and hyperparameters of a group of tensors (the meaning of "
     "alpha ... lr_decay per rule: docs/embedding.md).",
     [("uint32_t", "size", ""), ("int32_t", "rule", "FASTOPT_RULE_*"),
      ("int32_t", "flags", "FASTOPT_NESTEROV | ..."), ("int32_t", "reserved", "0"),
      ("int64_t", "t", "the step count"), ("double", "lr", ""), ("double", "alpha", ""),
      ("double", "beta", ""), ("double", "eps", ""), ("double", "decay", ""),
      ("double", "decay_post", ""), ("double", "lr_decay", ""),
      ("double[8]", "extra", "the further hyperparameters of NADAM_TORCH, ADEMAMIX, LAMB, "
                             "LARS (src_c/fastopt.h); the rest 0")]),
    ("fastopt_opts", "Step-wide options: unscale, the non-finite skip, clipping.",
     [("uint32_t", "size", ""), ("int32_t", "clip", "FASTOPT_CLIP_*"),
      ("int32_t", "norm_type", "FASTOPT_NORM_2 or FASTOPT_NORM_INF"),
      ("int32_t", "check_finite", "skip the step if a gradient is not finite"),
      ("int32_t", "measure", "FASTOPT_MEASURE_*"), ("int32_t", "reserved", "0"),
      ("double", "grad_scale", "1: no unscaling"), ("double", "max_norm", "with clip"),
      ("double", "clip_value", "0: none"), ("double", "norm", "with FASTOPT_MEASURE_GIVEN")]),
    ("fastopt_result", "What a call found, and on an error which argument was bad.",
     [("uint32_t", "size", ""), ("int32_t", "finite", "every gradient finite"),
      ("int32_t", "applied", "the update was written"),
      ("int32_t", "error_where", "FASTOPT_WHERE_*"),
      ("int32_t", "error_field", "FASTOPT_FIELD_*"), ("int32_t", "reserved", ""),
      ("int64_t", "error_index", "the tensor or group (-1: none)"),
      ("double", "norm", "the global norm (NaN if not measured)")]),
    ("fastopt_agc_tensor", "One tensor of adaptive gradient clipping (AGC).",
     [("uint32_t", "size", ""), ("uint32_t", "flags", "0 in v1"),
      ("void *", "x", ""), ("void *", "g", ""), ("void *", "v", "fused momentum only"),
      ("int64_t", "n_units", ""), ("int64_t", "unit_len", ""),
      ("double", "clipping", "> 0 clips, 0 excludes"),
      ("int32_t", "dtype", "FASTOPT_F32 or FASTOPT_F64"),
      ("int32_t", "kind", "FASTOPT_AGC_ROWS or FASTOPT_AGC_COLS")]),
]

# The table's header, fixed for the major version (the slots follow it, so it
# cannot grow): a struct added in a later minor version tells its size
# through a slot of that version.
TABLE_HEADER = ["abi_major", "abi_minor", "table_size", "sizeof_tensor", "sizeof_group",
                "sizeof_opts", "sizeof_result", "sizeof_agc_tensor"]

_STEP1 = [("const fastopt_group *", "group"), ("const fastopt_opts *", "opts"),
          ("fastopt_result *", "res"), ("int", "n_threads")]
# (name, minor, return type, params, doc), in table order
SLOTS = [
    ("version", 0, "const char *", [], "the package version"),
    ("error_string", 0, "const char *", [("int", "code")], "a return code's meaning"),
    ("field_name", 0, "const char *", [("int", "field")], "a FASTOPT_FIELD_* name"),
    ("isa_active", 0, "const char *", [], "the kernel clone this CPU runs"),
    ("default_threads", 0, "int", [], "the default thread count"),
    ("step", 0, "int", [("const fastopt_tensor *", "ts"), ("int64_t", "nt"),
                        ("const fastopt_group *", "gs"), ("int64_t", "ng"),
                        ("const fastopt_opts *", "opts"), ("fastopt_result *", "res"),
                        ("int", "n_threads")], "the whole step over a list"),
    ("step_f32", 0, "int", [("float *", "x"), ("const float *", "g"), ("float *", "s1"),
                            ("float *", "s2"), ("float *", "s3"), ("int64_t", "n")] + _STEP1,
     "one float32 tensor, as step"),
    ("step_f64", 0, "int", [("double *", "x"), ("const double *", "g"), ("double *", "s1"),
                            ("double *", "s2"), ("double *", "s3"), ("int64_t", "n")]
     + _STEP1, "one float64 tensor, as step"),
    ("global_norm", 0, "int", [("const void *const *", "gs"), ("const int64_t *", "ns"),
                               ("const int32_t *", "dtypes"), ("int64_t", "nt"),
                               ("double", "grad_scale"), ("int32_t", "norm_type"),
                               ("fastopt_result *", "res"), ("int", "n_threads")],
     "the global norm of a gradient list"),
    ("clip_grads", 0, "int", [("void *const *", "gs"), ("const int64_t *", "ns"),
                              ("const int32_t *", "dtypes"), ("int64_t", "nt"),
                              ("const fastopt_opts *", "opts"), ("fastopt_result *", "res"),
                              ("int", "n_threads")], "unscale and clip gradients in place"),
    ("agc", 0, "int", [("const fastopt_agc_tensor *", "ts"), ("int64_t", "nt"),
                       ("double", "eps"), ("fastopt_result *", "res"), ("int", "n_threads")],
     "adaptive gradient clipping in place"),
    ("agc_momentum", 0, "int", [("const fastopt_agc_tensor *", "ts"), ("int64_t", "nt"),
                                ("double", "eps"), ("const fastopt_group *", "group"),
                                ("fastopt_result *", "res"), ("int", "n_threads")],
     "ONNX Momentum on AGC-clipped gradients"),
]


def _read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def _rows(text, table):
    """The NAME of each row of one X-macro table of tables.h, in id order."""
    body = text.split("#define %s(X)" % table, 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\s*X\((\w+),", body, re.M)


def constants():
    """Every public constant: [(section, [(name, value, comment)])]."""
    tables, core = _read("src_c/tables.h"), _read("src_c/fastopt.h")
    defines = dict(re.findall(r"^#define (FO_\w+) (\d+)", core, re.M))
    return [
        ("return codes", [("FASTOPT_" + n, v, c) for n, v, c in ERRORS]),
        ("element types (src_c/tables.h)",
         [("FASTOPT_" + n, i, "") for i, n in enumerate(_rows(tables, "FO_DTYPE_TABLE"))]),
        ("update rules (src_c/tables.h)",
         [("FASTOPT_RULE_" + n, i, "") for i, n in enumerate(_rows(tables, "FO_RULE_TABLE"))]),
        ("group flags, clipping, norms, measuring, AGC units (src_c/fastopt.h)",
         [("FASTOPT_" + n, int(defines[m]), "") for n, m in FROM_CORE]),
        ("where an invalid argument is", [("FASTOPT_WHERE_" + n, i, "")
                                          for i, n in enumerate(WHERES)]),
        ("which field of it", [("FASTOPT_FIELD_" + n, i, "") for i, n in enumerate(FIELDS)]),
        ("the states' storage (fastopt_tensor.states)",
         [("FASTOPT_STATES_" + n, i, c) for i, (n, c) in enumerate(STATES)]),
    ]


def _decl(ctype, name):
    """`ctype name`; an array type T[N] gives `T name[N]`."""
    m = re.fullmatch(r"(.+)\[(\d+)\]", ctype)
    if m:
        return "%s %s[%s]" % (m.group(1), name, m.group(2))
    return ctype + name if ctype.endswith("*") else ctype + " " + name


def _proto(slot, name):
    params = ", ".join(_decl(t, n) for t, n in slot[3]) or "void"
    return "%s(%s)" % (_decl(slot[2], name), params)


def header():
    out = ["/* Generated by src_c/gen_capi.py from its listing: do not edit. */",
           "/*",
           " * fastopt's published C API, version %d.%d (docs/embedding.md)." % (MAJOR, MINOR),
           " * A Python extension includes this file (fastopt.get_include()) and",
           " * calls import_fastopt() once (with the GIL) before any fastopt_* call;",
           " * the calls themselves need no GIL and are reentrant. Define",
           " * FASTOPT_CAPI_TARGET_MINOR before including to build against an older",
           " * minor version: newer slots are hidden, older runtimes still load.",
           " */", "#ifndef FASTOPT_CAPI_H", "#define FASTOPT_CAPI_H", "",
           "#include <stdint.h>", "",
           "#define FASTOPT_CAPI_MAJOR %d" % MAJOR, "#define FASTOPT_CAPI_MINOR %d" % MINOR,
           '#define FASTOPT_CAPI_NAME "%s"' % CAPSULE,
           "#ifndef FASTOPT_CAPI_TARGET_MINOR",
           "#define FASTOPT_CAPI_TARGET_MINOR FASTOPT_CAPI_MINOR", "#endif", ""]
    for section, rows in constants():
        out.append("/* %s */" % section.capitalize())
        for name, value, comment in rows:
            line = "#define %s (%d)" % (name, value) if value < 0 else "#define %s %d" % (
                name, value)
            out.append(line + ("  /* %s */" % comment if comment else ""))
        out.append("")
    out += ["/* The names of the fields, in FASTOPT_FIELD_* order. */",
            "#define FASTOPT_FIELD_NAMES \\",
            "    " + ", ".join('"%s"' % f for f in FIELDS), "",
            "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
    for name, doc, fields in STRUCTS:
        out.append("/* %s */" % doc)
        out.append("typedef struct %s {" % name)
        for ctype, fname, comment in fields:
            out.append("    %s;%s" % (_decl(ctype, fname),
                                      "  /* %s */" % comment if comment else ""))
        out += ["} %s;" % name, ""]
    out += ["/* The table the capsule holds: a header, then the slots (append-only). */",
            "typedef struct fastopt_capi {",
            "    uint32_t " + ", ".join(TABLE_HEADER[:3]) + ";",
            "    uint32_t " + ", ".join(TABLE_HEADER[3:]) + ";"]
    for slot in SLOTS:
        if slot[1] > 0:
            out.append("#if FASTOPT_CAPI_TARGET_MINOR >= %d" % slot[1])
        out.append("    %s;  /* %s */" % (_proto(slot, "(*%s)" % slot[0]), slot[4]))
        if slot[1] > 0:
            out.append("#endif")
    out += ["} fastopt_capi;", ""]
    return out + _header_import()


def _header_import():
    out = ["#ifdef __cplusplus", "}", "#endif", "",
           "#ifndef FASTOPT_CAPI_IMPLEMENTATION",
           "#include <Python.h>", "",
           "#if defined(__GNUC__)", "#define FASTOPT_CAPI_UNUSED __attribute__((unused))",
           "#else", "#define FASTOPT_CAPI_UNUSED", "#endif", "",
           "/* The table, set by import_fastopt() (one per translation unit). */",
           "static const fastopt_capi *fastopt_api = NULL;", "",
           "/* The calls: fastopt_NAME(...) is slot NAME of the table. */"]
    for slot in SLOTS:
        names = ", ".join(n for _, n in slot[3])
        if slot[1] > 0:
            out.append("#if FASTOPT_CAPI_TARGET_MINOR >= %d" % slot[1])
        out.append("#define fastopt_%s(%s) (fastopt_api->%s(%s))"
                   % (slot[0], names, slot[0], names))
        if slot[1] > 0:
            out.append("#endif")
    return out + [
        "",
        "/* Import the table from fastopt's capsule: 0, or -1 with ImportError set",
        " * (fastopt missing, another major version, or a minor version older than",
        " * FASTOPT_CAPI_TARGET_MINOR). Call it with the GIL held. */",
        "static FASTOPT_CAPI_UNUSED int import_fastopt(void)",
        "{",
        "    const fastopt_capi *t =",
        "        (const fastopt_capi *)PyCapsule_Import(FASTOPT_CAPI_NAME, 0);",
        "    if (t == NULL)",
        "        return -1;",
        "    int fits = t->abi_major == FASTOPT_CAPI_MAJOR",
        "               && t->table_size >= sizeof(fastopt_capi);",
        "#if FASTOPT_CAPI_TARGET_MINOR > 0",
        "    fits = fits && t->abi_minor >= FASTOPT_CAPI_TARGET_MINOR;",
        "#endif",
        "    if (!fits) {",
        "        PyErr_Format(PyExc_ImportError,",
        '                     "fastopt C API: this module needs version %d.%d or a later "',
        '                     "%d.x, the installed fastopt has %u.%u; rebuild the module "',
        '                     "against this fastopt (fastopt.get_include())",',
        "                     FASTOPT_CAPI_MAJOR, FASTOPT_CAPI_TARGET_MINOR, FASTOPT_CAPI_MAJOR,",
        "                     (unsigned)t->abi_major, (unsigned)t->abi_minor);",
        "        return -1;",
        "    }",
        "    fastopt_api = t;",
        "    return 0;",
        "}",
        "#endif /* FASTOPT_CAPI_IMPLEMENTATION */", "",
        "#endif /* FASTOPT_CAPI_H */"]


def _pxd_type(ctype):
    return ctype.replace(" *const *", " **").replace("*", "").strip(), ctype.count("*")


def _pxd_decl(ctype, name):
    if ctype.endswith("]"):
        return _decl(ctype, name)
    base, stars = _pxd_type(ctype)
    return "%s %s%s" % (base, "*" * stars, name)


def pxd():
    out = ["# Generated by src_c/gen_capi.py from its listing: do not edit.",
           "# fastopt's published C API for Cython (docs/embedding.md): in a .pyx,",
           "#     from fastopt.cython_api cimport *",
           "#     import_fastopt()",
           "# then call fastopt_step(...) and the others with or without the GIL.",
           "from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t", "", "",
           'cdef extern from "fastopt/fastopt_capi.h" nogil:',
           "    const char *FASTOPT_CAPI_NAME", "    enum:",
           "        FASTOPT_CAPI_MAJOR", "        FASTOPT_CAPI_MINOR"]
    for _, rows in constants():
        out += ["        " + name for name, _, _ in rows]
    for name, _, fields in STRUCTS:
        out += ["", "    ctypedef struct %s:" % name]
        out += ["        " + _pxd_decl(t, n) for t, n, _ in fields]
    out += ["", "    ctypedef struct fastopt_capi:",
            "        uint32_t abi_major", "        uint32_t abi_minor",
            "        uint32_t table_size", "",
            "    const fastopt_capi *fastopt_api", ""]
    for slot in SLOTS:
        params = ", ".join(_pxd_decl(t, n) for t, n in slot[3])
        line = "    %s(%s)" % (_pxd_decl(slot[2], "fastopt_" + slot[0]), params)
        indent = " " * (line.index("(") + 1)
        while len(line) > 99:
            cut = line.rfind(", ", 0, 99)
            out.append(line[:cut + 1])
            line = indent + line[cut + 2:]
        out.append(line)
    out += ["", "", 'cdef extern from "fastopt/fastopt_capi.h":',
            "    int import_fastopt() except -1"]
    return out


def manifest():
    structs = {name: [[t, n] for t, n, _ in fields] for name, _, fields in STRUCTS}
    return {"capsule": CAPSULE, "abi_major": MAJOR, "abi_minor": MINOR,
            "header": TABLE_HEADER,
            "structs": structs,
            "slots": [{"name": s[0], "minor": s[1], "restype": s[2],
                       "argtypes": [t for t, _ in s[3]]} for s in SLOTS],
            "constants": {n: v for _, rows in constants() for n, v, _ in rows}}


def outputs():
    """{path: text} of the three generated files."""
    return {HEADER: "\n".join(header()) + "\n", PXD: "\n".join(pxd()) + "\n",
            MANIFEST: json.dumps(manifest(), indent=1) + "\n"}


def main(argv):
    stale = []
    for path, text in outputs().items():
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            stale.append(os.path.relpath(path, ROOT))
            if "--check" not in argv:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
    if stale and "--check" in argv:
        print("out of date (run python src_c/gen_capi.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
