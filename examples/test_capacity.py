"""Capacity under an SLO: the highest request rate at which the SLO still holds.

``vllm_perf.capacity`` searches the rate of the workload's open-loop class: it doubles
or halves the rate until one pass keeps the SLO and another breaks it, bisects, then
fits the SLO margin against the rate around the boundary and reports the capacity with
a 95% interval, the passes it used and the seconds it took. ``capacity_rps`` is judged
like any metric at the search's tolerance: against the stored capacity baseline
(``--vllm-save-baseline`` saves it), or in an A/B run (``--vllm-profile=chunked
--vllm-ab=default``) both sides are searched pass by pass in turn and the ratio gets a
95% interval ("capacity_rps x0.880 (95% CI x0.85..x0.91), regressed at 10%"). On two
shared CPU cores the margin near the boundary is noisier than its rise over a few
passes, so the line there may say "not resolved" and give the bracket instead
(docs/results.md); an unresolved side makes the verdict ``inconclusive``.
"""

LOAD = {
    "cpu": {"duration_s": 6, "requests": {"rate": 1.0, "prompt_tokens": 256, "output_tokens": 32}},
    "cuda": {
        "duration_s": 10,
        "requests": {"rate": 8.0, "prompt_tokens": 1024, "output_tokens": 128},
    },
}
# The SLO of an interactive service: the first token within a second for 99% of
# requests, and streaming without a visible stall. On two shared CPU cores the limits
# are looser, and 10 passes a side (a 20% tolerance) keep the A/B demo to a few minutes;
# the noise there often leaves the interval unbounded (docs/results.md).
SLO = {
    "cpu": {"ttft_p99_ms": 3_000, "itl_p99_ms": 1_000},
    "cuda": {"ttft_p99_ms": 1_000, "itl_p99_ms": 100},
}
SEARCH = {"cpu": {"tolerance": 0.2, "max_passes": 10}, "cuda": {"tolerance": 0.1, "max_passes": 20}}


def test_capacity_under_the_slo(vllm_perf):
    platform = vllm_perf.server.platform
    found = vllm_perf.capacity(
        "capacity", slo=SLO[platform], min_rps=0.1, **SEARCH[platform], **LOAD[platform]
    )
    # the search bracketed the boundary: one pass held the SLO, a faster one broke it
    # (on two shared CPU cores the fit's interval may stay unbounded: the line says so)
    assert found.search.held > 0 and found.search.broke < float("inf")
    assert found.search.passes <= SEARCH[platform]["max_passes"]
