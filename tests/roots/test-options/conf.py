extensions = ["myst_parser", "verified"]
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence"]
verified_normalizers = {"hex": [["0x[0-9a-f]+", "0x?"]]}
