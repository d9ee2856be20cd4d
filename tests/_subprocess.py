"""Run Python in a subprocess that imports the same fastopt as the tests.

The subprocess runs in a scratch directory with PYTHONPATH pointing at the
directory the tests' fastopt came from: from the checkout's root, ``-c`` and
``-m`` would otherwise put the source tree (without the compiled extension,
when testing an installed package) first on sys.path.
"""
import os
import subprocess
import sys

import fastopt


def run_python(args, cwd, **kw):
    here = os.path.dirname(os.path.dirname(os.path.abspath(fastopt.__file__)))
    env = dict(os.environ, PYTHONPATH=here)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=kw.pop("timeout", 120), **kw)
