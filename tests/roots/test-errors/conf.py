extensions = ["myst_parser", "verified"]
exclude_patterns = ["_build"]
verified_jobs = 2
verified_timeout = 60
# As in test-platform: the "platform" is this interpreter on the CPU with a variable set.
verified_platforms = [{"name": "stand-in", "label": "Stand-in", "backend": "cpu",
                       "env": {"VERIFIED_TEST_PLATFORM": "1"}}]
