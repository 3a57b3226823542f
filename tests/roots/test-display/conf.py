extensions = ["myst_parser", "verified"]
exclude_patterns = ["_build"]
verified_jobs = 2
verified_timeout = 60
