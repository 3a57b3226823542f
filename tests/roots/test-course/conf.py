extensions = ["myst_parser", "sphinx_design", "verified", "course"]
exclude_patterns = ["_build"]
course_readings = "readings.yaml"
