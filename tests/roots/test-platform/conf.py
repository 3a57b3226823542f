import sys

extensions = ["myst_parser", "verified"]
exclude_patterns = ["_build"]
verified_jobs = 2
verified_timeout = 60
# The "platform" is this same interpreter on the CPU with a variable the blocks read: the
# tests need no accelerator (`make platform-doctest` checks the real one, on its machine).
verified_platforms = [{"name": "stand-in", "label": "Stand-in", "backend": "cpu",
                       "env": {"VERIFIED_TEST_PLATFORM": "1"},
                       "no_multiprocess": "the stand-in runs no page of several processes"}]
