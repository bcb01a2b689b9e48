from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.fake_server import FakeVllm, ServerThread

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def fake_vllm():
    fake = FakeVllm()
    with ServerThread(fake) as url:
        fake.url = url
        yield fake


@pytest.fixture
def perf_project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester folder with the repository's profiles in ./profiles."""
    shutil.copytree(REPO / "profiles", pytester.path / "profiles")
    return pytester
