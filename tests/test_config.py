"""Each conf.py value is validated: a bad value stops the build with a message naming it."""

from __future__ import annotations


import pytest

from verified.config import parse_doc_settings
from verified.mistakes import UserMistake

BAD_VALUES = [
    ("verified_timeout", -1, "verified_timeout must be a positive number"),
    ("verified_timeout", True, "verified_timeout must be a positive number"),
    ("verified_jobs", -2, "verified_jobs must be a non-negative integer"),
    ("verified_env", {"A": 1}, "verified_env must map variable names to strings"),
    ("verified_record_dir", "", "verified_record_dir must not be empty"),
    ("verified_cache_dir", 3, "verified_cache_dir must be a path string"),
    ("verified_report", ["x"], "verified_report must be a path string"),
    ("verified_normalizers", {"n": [["(", "x"]]}, "bad regex '('"),
    ("verified_normalizers", {"n": ["x"]}, "each rule is [regex, replacement]"),
    ("verified_normalizers", {"n": []}, "must be a non-empty list"),
    ("verified_pages", [""], "verified_pages must be a list of page names"),
    ("verified_pages", [3], "verified_pages must be a list of page names"),
    ("verified_worker_cores", -1, "verified_worker_cores must be an integer from 0"),
    ("verified_worker_cores", 4096, "verified_worker_cores must be an integer from 0"),
    ("verified_fresh", 2, "verified_fresh must be True or False"),
    ("verified_matrix", [3], "verified_matrix: each entry is a version string"),
    ("verified_matrix", ["0.4.38", "0.4.38"], "verified_matrix: a name is given twice"),
    ("verified_platforms", [3], "verified_platforms: each entry is a platform name or a dict"),
    ("verified_platforms", ["tpu-v9"], "verified_platforms: unknown platform 'tpu-v9'"),
    ("verified_platforms", [{"name": "x", "label": "X"}], "platform 'x' needs a backend"),
    ("verified_platforms", [{"name": "X Y", "label": "X", "backend": "cpu"}],
     "a platform's name is lower-case letters"),
    ("verified_platforms", [{"name": "x", "label": "X", "backend": "cpu", "page_limit": 0}],
     "page_limit must be a positive number"),
    ("verified_platforms", [{"name": "x", "label": "X", "backend": "cpu", "gpu": 1}],
     "unknown key(s) gpu"),
    ("verified_platform_run", "gpu-h100", "verified_platform_run must name verified platforms"),
    ("verified_platform_run", [3], "verified_platform_run must name verified platforms"),
]


@pytest.mark.parametrize(("name", "value", "message"), BAD_VALUES)
def test_bad_config_value(site, name, value, message):
    """Each is one line that names conf.py (a ``UserMistake``: no crash report)."""
    with pytest.raises(UserMistake) as caught:
        site("basic").build(confoverrides={name: value})
    assert str(caught.value).startswith("site/conf.py: ") and message in str(caught.value)


@pytest.mark.parametrize(("settings", "message"), [
    ({"host_devices": 0}, "host_devices must be a positive integer"),
    ({"host_devices": "8"}, "host_devices must be a positive integer"),
    ({"timeout": -5}, "timeout must be a positive number"),
    ({"budget": "long"}, "budget must be a positive number"),
    ({"exclusive": "yes"}, "exclusive must be true, false or varies"),
    ({"env": ["A=1"]}, "env must map variable names"),
    ({"env": {"A": None}}, r"env values are strings or numbers; A is not \(quote the value\)"),
    ({"env": {"A": True, "B": [1]}}, "env values are strings or numbers; A, B are not"),
    ({"colour": 1}, "unknown execution setting"),
    ({"tolerance": "rtol=much"}, "tolerance: rtol must be a number"),
    ({"tolerance": "integers"}, "tolerance: a tolerance needs rtol > 0"),
])
def test_bad_front_matter_setting(settings, message):
    with pytest.raises(ValueError, match=message):
        parse_doc_settings({"execution": settings})


def test_good_front_matter_settings():
    settings = parse_doc_settings({"execution": {"host_devices": 8, "env": {"B": 2, "A": "x"},
                                                 "timeout": 30, "exclusive": True}})
    assert settings.host_devices == 8 and settings.exclusive and settings.timeout == 30
    assert settings.env == (("A", "x"), ("B", "2"))
    assert parse_doc_settings(None) == parse_doc_settings({"title": "no execution key"})
    assert parse_doc_settings({"execution": {"tolerance": "rtol=1e-4"}}).tolerance.rtol == 1e-4
