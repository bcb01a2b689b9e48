"""PNG plots of outcomes (matplotlib is an optional extra: ``pip install pytest-vllm-perf[plots]``).

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
from pytest_vllm_perf.verdict.baseline import slug

__all__ = ["PlotsUnavailable", "write"]


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotsUnavailable(
            "--vllm-plots needs matplotlib: pip install 'pytest-vllm-perf[plots]'"
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
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for o in group:
        s = o.result.gauges
        axes[0].plot([x.t for x in s], [(x.kv_cache_usage or 0) * 100 for x in s], label=o.profile)
        axes[1].plot([x.t for x in s], [x.waiting or 0 for x in s], label=o.profile)
    for ax, title, unit in (
        (axes[0], "KV cache usage", "%"),
        (axes[1], "requests waiting", "count"),
    ):
        ax.set_title(title)
        ax.set_xlabel("s into the run")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{group[0].test_id}: server gauges from /metrics")
    return _save(plt, fig, path)


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
