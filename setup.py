"""Extension wiring for fastopt; all metadata lives in pyproject.toml.

The C core is compiled with -O3 -fno-math-errno -ffp-contract=off
-fvisibility=hidden (never fast-math, no native-CPU tuning): -fno-math-errno
lets GCC vectorize the sqrt of Adagrad/Adam, -ffp-contract=off keeps every
ISA path bit-identical to a NumPy evaluation of the same expression
(docs/semantics.md), and only the module init function is exported.

OpenMP is probed by compiling and linking a tiny parallel program with the
build's own compiler. Without it the build falls back to a serial extension
with a loud warning; FASTOPT_REQUIRE_OPENMP=1 makes that an error.
FASTOPT_NO_OPENMP=1 skips the probe (a serial build on purpose).
FASTOPT_DEBUG=1 turns Cython's bounds/wraparound checks back on.
Extra compile/link flags (sanitizers) come from FASTOPT_EXTRA_CFLAGS and
FASTOPT_EXTRA_LDFLAGS.
"""
import os
import shlex
import shutil
import sys
import tempfile
import textwrap

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# -fvisibility=hidden: the extension exports its module init function only
# (PyInit__ext, marked by CPython's headers); the C core's fo_* names and
# Cython's internals stay inside it.
BASE_CFLAGS = ["-O3", "-fno-math-errno", "-ffp-contract=off", "-fvisibility=hidden"]
OPENMP_FLAGS = ["-fopenmp"]

# Oldest NumPy C-API the extension may use, so a wheel built against NumPy 2
# runs on every NumPy the package accepts (numpy>=1.25 in pyproject.toml).
NPY_TARGET = ("NPY_TARGET_VERSION", "NPY_1_25_API_VERSION")


def _probe_openmp(compiler):
    """Compile and link a tiny OpenMP program with this build's compiler."""
    src = textwrap.dedent("""
        #include <omp.h>
        int main(void) {
            int n = 0;
            #pragma omp parallel reduction(+:n)
            n += 1;
            return n > 0 && omp_get_max_threads() > 0 ? 0 : 1;
        }
    """)
    tmp = tempfile.mkdtemp(prefix="fastopt-omp-")
    try:
        path = os.path.join(tmp, "probe.c")
        with open(path, "w") as f:
            f.write(src)
        objs = compiler.compile([path], output_dir=tmp, extra_postargs=OPENMP_FLAGS)
        compiler.link_executable(objs, os.path.join(tmp, "probe"),
                                 extra_postargs=OPENMP_FLAGS)
        return True
    except Exception:  # any compile or link failure means "no OpenMP"
        return False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class BuildExt(build_ext):
    def build_extensions(self):
        # FASTOPT_NO_OPENMP=1 builds as if the compiler had no OpenMP (CI uses
        # it to prove the serial fallback builds and passes the tests).
        openmp = (os.environ.get("FASTOPT_NO_OPENMP") != "1"
                  and _probe_openmp(self.compiler))
        if not openmp:
            msg = ("fastopt: no OpenMP (the compiler cannot build an OpenMP program, "
                   "or FASTOPT_NO_OPENMP=1); building a SERIAL extension "
                   "(n_threads will have no effect)")
            if os.environ.get("FASTOPT_REQUIRE_OPENMP") == "1":
                raise RuntimeError(msg + " and FASTOPT_REQUIRE_OPENMP=1")
            sys.stderr.write("\n" + "!" * 72 + "\nWARNING: " + msg + "\n" + "!" * 72 + "\n")
        extra_c = shlex.split(os.environ.get("FASTOPT_EXTRA_CFLAGS", ""))
        extra_l = shlex.split(os.environ.get("FASTOPT_EXTRA_LDFLAGS", ""))
        cflags = BASE_CFLAGS + (OPENMP_FLAGS if openmp else []) + extra_c
        lflags = (OPENMP_FLAGS if openmp else []) + extra_l
        for ext in self.extensions:
            ext.extra_compile_args = cflags
            ext.extra_link_args = lflags
            ext.define_macros = list(ext.define_macros) + [
                ("FASTOPT_VERSION", '"%s"' % self.distribution.get_version()),
                ("FASTOPT_BUILD_CFLAGS", '"%s"' % " ".join(cflags)),
                ("FASTOPT_BUILD_COMPILER", '"%s"' % " ".join(self.compiler.compiler_so[:1])),
            ]
        super().build_extensions()


debug = os.environ.get("FASTOPT_DEBUG") == "1"


def _generate_capi():
    """Write the published C API's header, .pxd and ABI manifest from the
    listing in src_c/gen_capi.py (generated files stay out of git)."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "src_c"))
    try:
        import gen_capi
    finally:
        sys.path.pop(0)
    gen_capi.main([])


_generate_capi()

# The C library, every file once: the update drivers and kernels, AGC, the
# thread pool. They are compiled once, with the flags above, into the core
# extension fastopt._ext
# (fastopt/_ext.pyx folds the fast paths of every op; fastopt/_cfastopt.pxd
# declares src_c/fastopt.h).
C_SOURCES = ["src_c/fastopt.c", "src_c/pool.c", "src_c/machine_load.c", "src_c/agc.c",
             "src_c/step.c", "src_c/step_norm.c", "src_c/half.c", "src_c/q8.c",
             "src_c/capi.c"]
C_DEPENDS = ["src_c/fastopt.h", "src_c/tables.h", "src_c/half.h", "src_c/rules.h",
             "src_c/pool.h",
             "src_c/agc.inc", "src_c/types.inc", "src_c/types_own16.inc", "src_c/instance.inc",
             "src_c/step_rules.inc", "src_c/step_rules_adam.inc", "src_c/step_rules_trust.inc",
             "src_c/step_coefs.inc", "src_c/step_apart.inc", "src_c/step_trust.inc",
             "src_c/step.inc", "src_c/step.h", "src_c/step_norm.inc",
             "src_c/capi.h", "src_c/capi_agc.inc", "src_c/q8_maps.inc",
             "src_c/q8_bytes.inc",
             "fastopt/include/fastopt/fastopt_capi.h",
             "fastopt/_cfastopt.pxd"] + sorted(
                 os.path.join("fastopt", f) for f in os.listdir("fastopt")
                 if f.endswith(".pxi"))

NPY_MACROS = [NPY_TARGET, ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]

extensions = [
    Extension(
        "fastopt._ext",
        sources=["fastopt/_ext.pyx"] + C_SOURCES,
        include_dirs=["src_c", np.get_include()],
        depends=C_DEPENDS,
        define_macros=NPY_MACROS,
    ),
    # Two front ends' own compiled per-step checks, which read their objects'
    # attributes (an optimizer's, torch tensors'; the flat layout's check,
    # torch's objects themselves): kept out of the core, which knows arrays
    # and pointers only. No C sources of their own.
    Extension("fastopt.optim._compiled", sources=["fastopt/optim/_compiled.pyx"],
              define_macros=NPY_MACROS),
    Extension("fastopt.torch._compiled", sources=["fastopt/torch/_compiled.pyx"],
              include_dirs=[np.get_include()], define_macros=NPY_MACROS),
    Extension("fastopt.torch._flatcheck", sources=["fastopt/torch/_flatcheck.pyx"],
              depends=["fastopt/torch/_flatahead.pxi"]),
    # A tool: the bandwidth ceiling `fastopt bench` compares with, apart from
    # the library (import fastopt does not load it).
    Extension("fastopt._cli._probe", sources=["fastopt/_cli/_probe.pyx", "src_c/ceiling.c"],
              include_dirs=[np.get_include()], define_macros=NPY_MACROS),
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={
            "language_level": 3,
            "boundscheck": debug,
            "wraparound": debug,
            "initializedcheck": debug,
            "cdivision": True,
            "embedsignature": True,
        },
    ),
    cmdclass={"build_ext": BuildExt},
)
