"""The options reference (docs/reference.md) matches what ``pytest --help`` offers."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "docs" / "reference.md"


def test_options_reference_matches_pytest_help(pytester):
    help_text = pytester.runpytest("--help").stdout.str()
    offered = set(re.findall(r"(--vllm-[a-z-]+)", help_text))
    ini = set(re.findall(r"^\s+(vllm_[a-z_]+) \(", help_text, re.MULTILINE))
    block = README.read_text().split("<!-- reference:options -->")[1].split("<!-- /ref")[0]
    documented = set(re.findall(r"`(--vllm-[a-z-]+)", block))
    documented_ini = set(re.findall(r"`(vllm_[a-z_]+)`", block))
    assert offered and offered == documented
    assert ini and ini == documented_ini


def test_help_shows_no_option_the_plugin_does_not_need(pytester):
    """pytest-benchmark was a dependency for machine info alone, and added 46
    ``--benchmark-*`` lines to every user's ``--help``; nothing of it is left."""
    help_text = pytester.runpytest("--help").stdout.str()
    assert "--vllm-profile" in help_text
    assert "--benchmark" not in help_text
