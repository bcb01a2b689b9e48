"""The run history in PostgreSQL (``vllm-perf history append --to postgresql://...``):
one row per run, series and metric, read back as the CSV store's rows for the same
change-point analysis. Needs pg8000 (``pip install 'pytest-vllm-perf[history]'``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from pytest_vllm_perf.store import naming
from pytest_vllm_perf.tools import history

__all__ = ["PG_TABLE", "connect", "pg_analyze", "pg_append"]

# PostgreSQL: one row per run, series and metric, so that any metric can be added
# without a schema change; the primary key makes appending the same run a no-op. The
# table name is written into each statement (no SQL is built from strings).
PG_TABLE: Final = "vllm_perf_history"
_PG_SCHEMA: Final = """CREATE TABLE IF NOT EXISTS vllm_perf_history (
    hardware_class text NOT NULL, test text NOT NULL, profile text NOT NULL,
    run_id text NOT NULL, time timestamptz NOT NULL, commit text NOT NULL,
    vllm_version text NOT NULL, model text NOT NULL, platform text NOT NULL,
    profile_hash text NOT NULL, passes integer NOT NULL, metric text NOT NULL,
    value double precision, spread double precision,
    PRIMARY KEY (hardware_class, test, profile, run_id, metric))"""


def connect(url: str) -> Any:
    """A pg8000 connection (Otava's own PostgreSQL driver) for ``postgresql://`` URLs."""
    from urllib.parse import unquote, urlsplit

    try:
        import pg8000.native
    except ImportError as exc:
        raise history.HistoryError(
            "a PostgreSQL history needs pg8000: pip install 'pytest-vllm-perf[history]'"
        ) from exc
    parts = urlsplit(url)
    try:
        return pg8000.native.Connection(
            unquote(parts.username or "postgres"), host=parts.hostname or "127.0.0.1",
            port=parts.port or 5432, database=(parts.path or "/").lstrip("/") or None,
            password=unquote(parts.password) if parts.password else None, timeout=30,
        )  # fmt: skip
    except (OSError, pg8000.native.Error) as exc:  # the password never reaches the message
        raise history.HistoryError(f"{parts.hostname}:{parts.port}: PostgreSQL: {exc}") from exc


def pg_append(url: str, rows: Sequence[Mapping[str, str]]) -> list[str]:
    """Append ``rows`` to the PostgreSQL history in one transaction; a run already
    there is left out. One line per series touched."""
    con = connect(url)
    try:
        con.run(_PG_SCHEMA)
        con.run("BEGIN")
        counts: dict[tuple[str, str, str], int] = {}
        for row in rows:
            key = (row["hardware_class"], row["test"], row["profile"])
            metrics = [
                k for k in row if k not in history.COLUMNS and not k.endswith(history.SPREAD)
            ]
            added = 0
            for metric in metrics:
                value, spread = row[metric], row.get(metric + history.SPREAD, "")
                done = con.run(
                    "INSERT INTO vllm_perf_history VALUES (:hw, :test, :profile, :run_id, :time, "
                    ":commit, :vllm, :model, :platform, :hash, :passes, :metric, :value, "
                    ":spread) ON CONFLICT DO NOTHING RETURNING 1",
                    hw=key[0], test=key[1], profile=key[2], run_id=row["run_id"],
                    time=row["time"], commit=row["commit"], vllm=row["vllm_version"],
                    model=row["model"], platform=row["platform"], hash=row["profile_hash"],
                    passes=int(row["passes"]), metric=metric,
                    value=float(value) if value else None,
                    spread=float(spread) if spread else None,
                )  # fmt: skip
                added = added or bool(done)
            counts[key] = counts.get(key, 0) + int(added)
        con.run("COMMIT")
        lines = []
        for (hw, test, profile), added in counts.items():
            [[runs]] = con.run(
                "SELECT count(DISTINCT run_id) FROM vllm_perf_history "
                "WHERE hardware_class = :hw AND test = :test AND profile = :profile",
                hw=hw, test=test, profile=profile,
            )  # fmt: skip
            lines.append(f"{PG_TABLE} {hw}/{test}--{profile}: {runs} run(s), {added} appended")
        return lines
    finally:
        con.close()


def pg_analyze(url: str, max_pvalue: float = 0.001, window: int = 30) -> list[history.ChangePoint]:
    """Otava's change points in every series of the PostgreSQL history."""
    con = connect(url)
    try:
        con.run(_PG_SCHEMA)
        found = []
        series = con.run(
            "SELECT DISTINCT hardware_class, test, profile FROM vllm_perf_history ORDER BY 1, 2, 3"
        )
        for hw, test, profile in series:
            records = con.run(
                "SELECT run_id, time, commit, platform, metric, value FROM vllm_perf_history "
                "WHERE hardware_class = :hw AND test = :test AND profile = :profile "
                "ORDER BY time, run_id",
                hw=hw, test=test, profile=profile,
            )  # fmt: skip
            runs: dict[str, dict[str, str]] = {}
            stamps: dict[str, int] = {}
            for run_id, time, commit, platform, metric, value in records:
                row = runs.setdefault(
                    run_id, {"time": time.isoformat(), "commit": commit, "platform": platform}
                )
                stamps[run_id] = int(time.timestamp())
                row[metric] = "" if value is None else repr(value)
            metrics = sorted({m for r in runs.values() for m in r} - {"time", "commit", "platform"})
            name = f"{naming.slug(hw)}/{naming.slug(test)}/{naming.slug(profile)}"
            found += history.change_points(
                name, list(runs.values()), [stamps[k] for k in runs], metrics, max_pvalue, window
            )
        return found
    finally:
        con.close()
