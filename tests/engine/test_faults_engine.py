"""Faults on the real engine during the load: a port taken before vLLM binds it and an
engine core killed during the load, both on the preemption test's small-KV boot. Each
ends the run in bounded time with the documented status and nothing left running.
Faults before and during a boot (Ctrl-C while vLLM boots, a flag vLLM rejects) are
tests/engine/test_faults_boot.py's: apart, so that CI's workers, which take whole
files, run them beside this file's long test instead of after it (together they were
the longest chain of CI's engine tests, 413-446 s).

The rest of the fault matrix: SIGTERM during the load is tests/engine/test_interrupt.py's;
the API server killed with its children orphaned, a
hanging or crashing boot and a port lost are tests/unit/test_server_lifecycle.py's,
through a stub launcher; faults without a dying process (HTTP 500, a stalled stream, a
full disk, a refused folder, a corrupt baseline) are in tests/plugin/test_faults.py,
tests/unit/test_baseline_store.py and tests/plugin/test_gate.py.
"""

from __future__ import annotations

import os
import re
import signal

import pytest

from tests.real_engine import (
    engine_core,
    pytest_child,
    read_until,
    require_engine,
    vllm_processes,
)

pytestmark = pytest.mark.engine

# The first port the plugin picks is held by a listener, as another process could take it
# between the pick and vLLM's bind: vLLM must fail with its own "address already in use"
# and the plugin retry on a new port (tests/unit/test_server_lifecycle.py covers the
# retry logic with a stub; this shows vLLM's real message is recognised). It rides on
# the preemption test's boot, since CI pays for every boot.
PORT_TAKEN = """
import socket

from pytest_vllm_perf.serving import server

HELD = socket.socket()
HELD.bind(("127.0.0.1", 0))
HELD.listen()
_real, _calls = server.free_port, []


def _first_taken(host="127.0.0.1"):
    _calls.append(host)
    return HELD.getsockname()[1] if len(_calls) == 1 else _real(host)


server.free_port = _first_taken
"""


TIGHT_KV = """
extends: small-kv
description: small-kv with one 512-token sequence's worth of CPU KV cache
cpu: {num_gpu_blocks_override: 5}
"""


def test_preemptions_counted_a_taken_port_retried_and_a_killed_engine_core_ends_the_run(
    perf_project, no_orphans
):
    """Three claims on one small-KV boot, since CI pays for every boot:

    - a first test under KV pressure counts vLLM's preemptions (``min_preemptions: 1``):
      a 256-token prompt fills two CPU blocks of 128 tokens, so its first
      output token needs a third. On ``small-kv``'s 12 blocks that took five requests
      decoding at once, and beside two CPU burners the starved API server handed them
      to the engine too far apart: 0 preempted, the test failed (fresh clone of
      4484b34), and with 192 tokens a request beside more burners. ``TIGHT_KV`` leaves 5
      blocks, one 512-token sequence's worth (vLLM keeps one back: with 4 it refused
      to boot, "the estimated maximum model length is 384"), so any two requests of
      384 tokens that decode at once are preempted, and the pass counts to its last
      response;
    - the port taken before vLLM bound it is retried on a new one (``PORT_TAKEN``);
    - the second test's 600 s pass on the same server ends when vLLM's engine core is
      killed: only noticing the fault can end it within the bound, and the run ends
      with exit 1 and "vLLM server died", with nothing left (the orphan check).

    The API server killed instead (its children orphaned) is
    tests/unit/test_server_lifecycle.py's, through a stub whose child outlives it.

    Broken on purpose (TIGHT_KV's CPU blocks raised from 5 to 200), nothing is
    preempted in the 4 s pass, the child's ``min_preemptions`` threshold fails and so
    does the PREEMPTIONS check here.

    Broken on purpose (``measure`` not telling the load whether the server is alive),
    the 600 s pass goes on failing requests, the child still runs 120 s after the kill
    and the test fails on the timeout, with nothing left running.
    """
    require_engine()
    perf_project.makeconftest(PORT_TAKEN)
    (perf_project.path / "profiles" / "tight-kv.yaml").write_text(TIGHT_KV)
    perf_project.makepyfile(
        test_kv="""
        import pytest

        @pytest.mark.vllm_perf(workload="kv_pressure", profile="tight-kv", duration_s=4, repeat=1,
                               seq={"users": 8, "prompt_tokens": 256, "output_tokens": 128},
                               thresholds={"min_preemptions": 1})
        def test_a_kv(vllm_perf):
            outcome = vllm_perf.run()
            print("PREEMPTIONS", outcome.result.metrics["preemptions"])

        @pytest.mark.vllm_perf(workload="decode", profile="tight-kv", duration_s=600,
                               chat={"users": 2})
        def test_b_slow(vllm_perf):
            print("SLOW LOAD STARTING", flush=True)
            vllm_perf.run()
    """
    )
    output: list[str] = []
    with pytest_child(perf_project.path, no_orphans) as proc:
        # until a few seconds into the second test's load
        read_until(
            proc,
            output,
            lambda line: " done, " in line and any("SLOW LOAD STARTING" in o for o in output),
            # a wait, not a bound: beside CI's other engine files one boot took 204 s
            timeout_s=900,
        )
        slow = any("SLOW LOAD STARTING" in o for o in output)
        cores = engine_core(no_orphans)
        assert slow and cores, "".join(output)[-3000:]
        for pid in cores:
            os.kill(pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=120)
        output.append(rest)
    text = "".join(output)
    assert proc.returncode == 1, text[-3000:]
    preempted = re.search(r"^PREEMPTIONS [1-9].*", text, re.MULTILINE)
    assert preempted, text[-3000:]
    print(preempted.group(0))  # each run's count in CI's log
    assert re.search(r"port \d+ was taken before vLLM bound it; retrying on \d+", text), text
    assert "ready at http://127.0.0.1:" in text
    assert "vLLM server died" in text, text[-3000:]
    # the fault ended the pass, not the boot timeout nor the 600 s
    assert "not healthy after" not in text, text[-3000:]
    assert re.search(r"1 failed, 1 passed", text), text[-3000:]
    assert vllm_processes(str(perf_project.path)) == []
