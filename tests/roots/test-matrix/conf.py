import sys

extensions = ["myst_parser", "verified"]
exclude_patterns = ["_build"]
verified_jobs = 2
verified_timeout = 60
# The "other version" is this same interpreter with a variable the blocks read: the tests
# need no second virtualenv (`make matrix-doctest` checks the real one).
verified_matrix = [{"version": "0.0-old", "python": sys.executable,
                    "env": {"VERIFIED_TEST_OLD": "1"}}]
