# Build facts (included by _ext.pyx): setup.py defines FASTOPT_BUILD_CFLAGS
# and FASTOPT_BUILD_COMPILER for every C file of the build.

cdef extern from *:
    """
    #ifndef FASTOPT_BUILD_CFLAGS
    #define FASTOPT_BUILD_CFLAGS "unknown"
    #endif
    #ifndef FASTOPT_BUILD_COMPILER
    #define FASTOPT_BUILD_COMPILER "unknown"
    #endif
    """
    const char *FASTOPT_BUILD_CFLAGS
    const char *FASTOPT_BUILD_COMPILER


def build_info():
    """Compiler, flags and ISA paths the extension was built with."""
    return {
        "compiler": FASTOPT_BUILD_COMPILER.decode(),
        "cflags": FASTOPT_BUILD_CFLAGS.decode(),
        "isa_paths": fo_isa_paths().decode(),
        "isa_active": fo_isa_active().decode(),
    }


def tables():
    """The C core's tables (src_c/tables.h), as the C code sees them: rules
    as (NAME, most states, smallest t) and element types as (NAME, bytes),
    each in id order, and how many extra hyperparameters a group holds
    (FO_STEP_EXTRA). fastopt/_rules.py, fastopt/_dtypes.py and
    fastopt/_step.py must agree."""
    cdef fo_rule_facts r
    rules = []
    for i in range(FO_N_RULES):
        r = fo_rule_info(i)
        rules.append((r.name.decode(), r.states, r.t0))
    dtypes = [(fo_dtype_name(i).decode(), fo_dtype_size(i)) for i in range(FO_N_DTYPES)]
    return {"rules": rules, "dtypes": dtypes, "step_extra": FO_STEP_EXTRA}
