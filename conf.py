"""Sphinx configuration for "Learn to think in JAX". Built with `sphinx-build -c . source …`."""

import sys
from pathlib import Path

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT / "ext"))

project = "Learn to think in JAX"
author = "The JAX path"
copyright = "2026, The JAX path"

extensions = [
    "myst_parser",
    "sphinx_design",
    "sphinx_copybutton",
    "verified",
    "course",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3

html_theme = "sphinx_book_theme"
html_title = "Learn to think in JAX"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
}
html_static_path = ["source/_static"]
html_favicon = "source/_static/favicon.svg"
html_context = {"default_mode": "auto"}  # light or dark, following the reader's system

# Copy buttons on code only: never on outputs, captions or prompts.
copybutton_selector = "div.cell-input pre, div.highlight-python pre"

# The course is verified on CPU; pin the backend so a machine with a GPU runs the same thing.
verified_env = {"JAX_PLATFORMS": "cpu"}
verified_timeout = 300
# The other verified versions (`make matrix`): each runs under .venv-jax-VERSION, created from
# requirements-jax-VERSION.txt. Keep this list on one line (the Makefile reads it).
verified_matrix = ["0.4.38"]
# The verified platforms (`make platform`, on a machine with that accelerator): every block's
# caption gives its verdict there, and the Platforms page counts them.
verified_platforms = ["tpu-v5e"]
# jax 0.4.38 writes nothing to the compilation cache on CPU: "read from the cache, faster than
# compiling" compares two compilations there, and either can win. Its float32 matmul matches
# NumPy's bitwise on some CPUs (AVX-512) and not on others (AVX2).
verified_matrix_varies = {"part2/11-performance": ["faster than compiling it",
                                                   "bitwise equal to NumPy's float32 product"]}

# Every page of JAX 101, 201 and 301 and the Sharp Bits must be assigned in some chapter.
course_require_all_readings = True
# The verification statement names the device count of the sharding chapter's record.
course_sharding_chapter = "part2/10-sharding"
# The sibling course ("the kernel path"); unset, "Down the stack" asides render without a link.
course_kernel_path_url = ""
