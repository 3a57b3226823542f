extensions = ["myst_parser", "verified"]
exclude_patterns = ["_build"]
verified_env = {"JAX_PLATFORMS": "cpu"}
