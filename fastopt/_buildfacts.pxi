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
