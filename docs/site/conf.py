"""Sphinx configuration of fedsim's documentation site.

Build (README, .ci/run):

  pip install -e '.[docs]' && python -m sphinx -W -b html docs/site docs/_build

The tutorials in tutorials/ are MyST Markdown notebooks that myst-nb executes
during the build; a cell that raises fails it (nb_execution_raise_on_error).
"""

from __future__ import annotations

import os
import sys

# autodoc imports the fedsim of this checkout (not another installed copy).
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)
# The notebooks' kernels import fedsim too: they inherit the environment.
os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])

project = "fedsim"
author = "the fedsim authors"
copyright = "fedsim authors"  # noqa: A001 -- Sphinx's name

extensions = [
    "myst_nb",                   # MyST Markdown pages and executed notebooks (includes myst_parser)
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",       # Google-style docstrings
    "sphinx.ext.viewcode",
]

exclude_patterns = ["_build", "**.ipynb_checkpoints", "jupyter_execute"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb"}
root_doc = "index"

# -- API reference -------------------------------------------------------------------------
autosummary_generate = False      # tables only; the objects are documented on the same page
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_attr_annotations = True

# -- MyST / myst-nb ------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3
# Executed at build time. "cache": a notebook whose source is unchanged is taken from
# docs/.jupyter_cache (a fresh clone, as in CI, has none, so every tutorial runs; delete that
# folder, or build with -D nb_execution_mode=force, to rerun them against changed library code).
nb_execution_mode = "cache"
nb_execution_timeout = 300        # seconds per cell
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True

# -- HTML ----------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "fedsim"
html_theme_options = {"show_toc_level": 2}


def _skip_namedtuple_aliases(app, what, name, obj, skip, options):
  """Skips a NamedTuple's generated field accessors ("Alias for field number N"): the class
  docstring's ``Attributes:`` section documents each field once (napoleon)."""
  del app, what, name, options
  if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
    return True
  return skip


def setup(app):
  app.connect("autodoc-skip-member", _skip_namedtuple_aliases)
