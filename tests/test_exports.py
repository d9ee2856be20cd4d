"""The compiled extension exports its module init function and nothing
else: the C core's names (fo_*, step_*) and Cython's internals are hidden,
so they cannot clash with another library's in the same process."""
import shutil
import subprocess

import pytest

from fastopt import _ext


def test_the_extension_exports_only_its_init_function():
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run([nm, "-D", "--defined-only", _ext.__file__], capture_output=True,
                         text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    # a sanitizer build's runtime hooks are the toolchain's (reserved "__"
    # names), not fastopt's; Cython's own (__pyx_*) must be hidden too
    ours = {n for n in names if not n.startswith("__") or n.startswith("__pyx")}
    assert ours == {"PyInit__ext"}
