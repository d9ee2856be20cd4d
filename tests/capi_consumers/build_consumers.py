"""Build the test consumers of fastopt's published C API into a directory:

    python build_consumers.py OUTDIR

with setuptools' own compiler setup (the one fastopt's setup.py uses),
against fastopt.get_include() and fastopt/cython_api.pxd of the fastopt this
Python imports (the installed package, or a checkout on PYTHONPATH): a C
extension, the same C built for a newer minor version than exists (its
import must fail), a C++ extension, and one Cython module compiled as C
and as C++."""
import os
import shutil
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup

import fastopt

HERE = os.path.dirname(os.path.abspath(__file__))


def main(out):
    inc = [fastopt.get_include()]
    pyx = []
    for name in ("_fo_consumer_cy", "_fo_consumer_cy_cpp"):
        pyx.append(os.path.join(out, name + ".pyx"))
        shutil.copyfile(os.path.join(HERE, "consumer_cy.pyx"), pyx[-1])
    src_c, src_cpp = os.path.join(HERE, "consumer.c"), os.path.join(HERE, "consumer.cpp")
    cy = cythonize([Extension("_fo_consumer_cy", [pyx[0]], include_dirs=inc),
                    Extension("_fo_consumer_cy_cpp", [pyx[1]], include_dirs=inc,
                              language="c++")],
                   compiler_directives={"language_level": 3}, quiet=True)
    exts = [Extension("_fo_consumer_c", [src_c], include_dirs=inc),
            Extension("_fo_consumer_c_future", [src_c], include_dirs=inc,
                      define_macros=[("CONSUMER_NAME", "_fo_consumer_c_future"),
                                     ("FASTOPT_CAPI_TARGET_MINOR", "99")]),
            Extension("_fo_consumer_cpp", [src_cpp], include_dirs=inc, language="c++")] + cy
    try:
        import pybind11
    except ImportError:
        pass                  # the tests skip the pybind11 consumer
    else:
        exts.append(Extension("_fo_consumer_pybind",
                              [os.path.join(HERE, "consumer_pybind.cpp")],
                              include_dirs=inc + [pybind11.get_include()], language="c++"))
    setup(name="fastopt-capi-consumers", ext_modules=exts,
          script_args=["-q", "build_ext", "--build-lib", out,
                       "--build-temp", os.path.join(out, "build")])


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]))
