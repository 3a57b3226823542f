# The site's theme and extensions, which fill in configuration values once the builder exists.
extensions = ["myst_parser", "sphinx_design", "sphinx_copybutton", "verified"]
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "dollarmath"]
html_theme = "sphinx_book_theme"
html_theme_options = {"show_toc_level": 2}
verified_jobs = 2
verified_timeout = 60
# Its own list: the theme appends to it, and Sphinx's default list is shared by every build
# of one process (the tests build twice in one).
templates_path = []
