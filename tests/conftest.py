from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_vllm_perf.config.profiles import load
from pytest_vllm_perf.serving.pool import PoolConfig, ServerPool
from tests.fake_server import FakeVllm, ServerThread
from tests.real_engine import require_engine

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


@pytest.fixture(scope="session")
def real_server(tmp_path_factory):
    """One real vLLM CPU server with the default profile, shared by the engine tests."""
    require_engine()
    pool = ServerPool(PoolConfig(tmp_path_factory.mktemp("cache")), print)
    yield pool.get(load("default", REPO / "profiles"))
    pool.stop()
