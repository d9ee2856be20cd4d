"""Sphinx configuration for fastopt's documentation.

Why Sphinx + numpydoc + MyST:
- Sphinx with numpydoc is the convention of the scientific Python ecosystem
  fastopt belongs to (NumPy, SciPy, scikit-learn, PyWavelets): users know the
  look.
- fastopt's docstrings are already written in numpydoc form (Parameters,
  Returns, Raises, Examples); autodoc imports the public names and numpydoc
  renders those sections, so the API reference is the docstrings, never a copy.
- MyST lets the narrative pages be Markdown, readable as plain files on a code
  host too, while still using Sphinx directives (autodoc, doctest, toctree).

Every ``>>>`` example, in the pages and in the docstrings autodoc pulls in, runs
under the doctest builder (``python -m sphinx -b doctest docs ...``) in CI.
The build imports the INSTALLED fastopt (or an in-place build put first on
PYTHONPATH); nothing here edits sys.path.
"""

import fastopt

project = "fastopt"
author = "fastopt developers"
copyright = "2026, fastopt developers"
release = fastopt.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "numpydoc",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]

# Heading anchors let pages link to sections (`semantics.md#adam`).
myst_heading_anchors = 3

# autodoc + numpydoc: the reference documents the public import paths only.
autodoc_default_options = {"members": False, "undoc-members": False}
autodoc_typehints = "none"          # the numpydoc Parameters sections carry the types
numpydoc_show_class_members = False  # members are listed explicitly in api.md
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# doctest builder: every page's and docstring's examples start from this.
# The optional libraries a page compares with are None when not installed, and
# the examples that need them say `:skipif: torch is None` (CI installs them all).
doctest_global_setup = """
import importlib
import importlib.util

import numpy as np
import fastopt

def _optional(name):
    return importlib.import_module(name) if importlib.util.find_spec(name) else None

torch = _optional("torch")
optax = _optional("optax")
sklearn = _optional("sklearn")
mpi4py = _optional("mpi4py")
"""

html_theme = "alabaster"
html_title = f"fastopt {release}"
