extensions = ["myst_parser", "verified"]
exclude_patterns = ["_build"]
verified_jobs = 3  # the two-process page takes two
verified_timeout = 600
