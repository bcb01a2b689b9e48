"""A test-only pytest plugin (``-p tests.fake_sides``): every server the pool would boot,
both A/B sides included, is the fake OpenAI-compatible server at ``$FAKE_VLLM_URL``.

``--vllm-url`` with ``--vllm-ab`` is a usage error (one server you started cannot be
both sides), so the plugin tests of the A/B mechanism (naming, alternation, blocks,
revisions) swap the pool instead: the sides' profiles resolve as they would for a user,
and the measurements go to the fake server. Claims about real sides are made against
the real engine (tests/engine/test_pr_gate.py).
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from pytest_vllm_perf import state
from pytest_vllm_perf.serving.pool import ServerPool


@pytest.hookimpl(trylast=True)  # after the plugin's own pytest_configure made the pool
def pytest_configure(config: pytest.Config) -> None:
    session = state.of(config)
    pool, url = session.pool, os.environ["FAKE_VLLM_URL"]
    session.pool = ServerPool(dataclasses.replace(pool.config, external_url=url), pool.progress)
