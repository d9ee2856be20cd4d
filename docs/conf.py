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
under the doctest builder (``python -m sphinx -b doctest docs ...``) in CI, each
in a fresh namespace with no globals injected (see the doctest section below).
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

html_theme = "alabaster"
html_title = f"fastopt {release}"

# doctest builder: nothing is injected. Every example carries its own imports
# and runs in a namespace of its own, as if pasted into a fresh interpreter:
# each ```{doctest} block of a page, and each docstring's examples, is its own
# doctest group (Sphinx's default puts a whole page in one group, so a block
# could lean on an earlier block's imports). A block that needs an optional
# library says so with `:skipif: torch is None` (likewise optax, sklearn,
# mpi4py, numba); the condition is decided here, from whether the library is
# installed, without importing it. CI installs them all.
OPTIONAL = ("torch", "optax", "sklearn", "mpi4py", "numba")


def _doctest_nodes(doctree):
    from docutils import nodes

    def wanted(node):
        return isinstance(node, nodes.doctest_block) or (
            isinstance(node, nodes.Element) and node.get("testnodetype") == "doctest")
    return doctree.findall(wanted)


def _one_namespace_per_example(app, doctree):
    import importlib.util

    installed = {m: (True if importlib.util.find_spec(m) else None) for m in OPTIONAL}
    for node in _doctest_nodes(doctree):
        if node.get("groups", ["default"]) == ["default"]:
            source = node.source or app.env.docname
            # a docstring's examples (source "...:docstring of <name>") share a
            # namespace; a page's blocks do not
            key = source if ":docstring of " in source else f"{source}:{node.line}"
            node["groups"] = [key]
        if "skipif" in node:
            node["skipif"] = repr(bool(eval(node["skipif"], {}, dict(installed))))


def setup(app):
    app.connect("doctree-read", _one_namespace_per_example)
