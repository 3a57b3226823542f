from pathlib import Path

extensions = ["myst_parser", "verified"]
exclude_patterns = ["_build"]
verified_jobs = 2
verified_timeout = 60
# The pages write when their interpreters started and ended here, where the test reads it.
verified_env = {"LIFE_LOG": str(Path(__file__).resolve().parent / "life.log")}
