"""Sphinx configuration of classhub's documentation (``make docs``; Read the Docs: .readthedocs.yaml).

Pages are Markdown (MyST). The reference is generated from the code at build time
(docs/_ext/classhub_docs.py): the configuration from the traits (autodoc_traits), the REST API
from the OpenAPI document the service serves (sphinxcontrib-openapi), the command line from its
parser (sphinx-argparse), the metrics from the collectors. ``make docs`` builds with warnings as
errors (``-W``), so a broken cross-reference or a missing page fails the build.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS.parent), str(DOCS / "_ext")]

from hub_ext import __version__  # noqa: E402

project = "classhub"
copyright = "classhub contributors"
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "autodoc_traits",
    "sphinxcontrib.openapi",
    "sphinxarg.ext",
    "classhub_docs",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "reference/_generated/*.md", "**/README.md", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
# Headings get anchors down to level 4, so [text](page.md#a-heading) links are checked.
myst_heading_anchors = 4

autodoc_member_order = "bysource"
autodoc_typehints = "none"

html_theme = "pydata_sphinx_theme"
html_title = "classhub"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
html_static_path: list[str] = []

# The link check (make docs-linkcheck) looks at external links only; internal ones are checked by
# every build (-W) and by .ci/check_refs.py.
linkcheck_anchors = False

