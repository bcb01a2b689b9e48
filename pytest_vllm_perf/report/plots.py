"""PNG plots of outcomes (matplotlib is optional: ``pip install matplotlib``).

Per test: TTFT and ITL CDFs with one line per profile, a timeline of request
latencies, and the server's KV usage and waiting queue sampled during the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pytest_vllm_perf.core.errors import PlotsUnavailable
from pytest_vllm_perf.core.records import Outcome
from pytest_vllm_perf.store.naming import slug

__all__ = ["PlotsUnavailable", "write"]


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotsUnavailable(
            "needs matplotlib: pip install matplotlib (into this environment)"
        ) from exc
    return plt


def write(outcomes: Sequence[Outcome], folder: Path) -> list[Path]:
    """Write every plot for ``outcomes`` into ``folder``; returns the files written."""
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    by_test: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_test.setdefault(o.test_id, []).append(o)
    written = []
    for test_id, group in by_test.items():
        name = slug(test_id)
        written.append(_cdfs(plt, group, folder / f"{name}-cdf.png"))
        written.append(_timeline(plt, group, folder / f"{name}-timeline.png"))
        written.append(_server(plt, group, folder / f"{name}-server.png"))
    return written


def _cdfs(plt: Any, group: Sequence[Outcome], path: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for o in group:
        ttft = [r.ttft * 1000 for r in o.result.records if r.ttft is not None]
        itl = [x * 1000 for r in o.result.records for x in r.itl]
        for ax, values in ((axes[0], ttft), (axes[1], itl)):
            if values:
                xs = np.sort(values)
                ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=o.profile)
    for ax, title in zip(axes, ("TTFT", "ITL (per streamed chunk)"), strict=True):
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(plt.NullFormatter())  # minor labels overlap
        ax.set_xlabel("ms (log scale)")
        ax.set_ylabel("fraction of samples")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(group[0].test_id)
    return _save(plt, fig, path)


def _timeline(plt: Any, group: Sequence[Outcome], path: Path) -> Path:
    fig, axes = plt.subplots(len(group), 1, figsize=(11, 3 * len(group)), squeeze=False)
    for ax, o in zip(axes[:, 0], group, strict=True):
        for cls in o.result.workload.classes:
            recs = [r for r in o.result.records if r.cls == cls.name]
            ax.scatter(
                [r.start for r in recs],
                [r.e2el * 1000 for r in recs],
                s=8,
                label=f"{cls.name} E2EL",
            )
            ax.scatter(
                [r.start for r in recs if r.ttft is not None],
                [r.ttft * 1000 for r in recs if r.ttft is not None],
                s=8,
                marker="x",
                label=f"{cls.name} TTFT",
            )
        failed = [r for r in o.result.records if not r.ok]
        if failed:
            ax.scatter(
                [r.start for r in failed],
                [r.e2el * 1000 for r in failed],
                s=30,
                color="red",
                marker="X",
                label="failed",
            )
        ax.set_yscale("log")
        ax.set_ylabel("ms")
        ax.set_title(f"{o.profile}: request latency by start time")
        ax.legend(fontsize=7, ncol=3)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("request start (s into the run)")
    return _save(plt, fig, path)


def _server(plt: Any, group: Sequence[Outcome], path: Path) -> Path:
    """Each profile's gauges on a row of its own, on shared axes: drawn over one
    another, several profiles' lines could not be told apart."""
    fig, axes = plt.subplots(
        len(group), 2, figsize=(11, 2.4 * len(group) + 0.8), sharex=True, sharey="col",
        squeeze=False,
    )  # fmt: skip
    for row, o in zip(axes, group, strict=True):
        s = o.result.gauges
        t = [x.t for x in s]
        row[0].step(t, [(x.kv_cache_usage or 0) * 100 for x in s], where="post", lw=1)
        row[1].step(t, [x.waiting or 0 for x in s], where="post", lw=1, color="tab:orange")
        row[0].set_ylabel(f"{o.profile}\nKV cache %")
        row[1].set_ylabel("requests waiting")
        row[0].set_ylim(0, 100)
        row[1].set_ylim(bottom=0)
        for ax in row:
            ax.grid(alpha=0.3)
    axes[0, 0].set_title("KV cache usage")
    axes[0, 1].set_title("requests waiting")
    for ax in axes[-1]:
        ax.set_xlabel("s into the run")
    fig.suptitle(f"{group[0].test_id}: server gauges from /metrics, one row a profile")
    return _save(plt, fig, path)


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
