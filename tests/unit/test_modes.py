"""The decision modes as objects (``measure.modes``): what each boots when it is built,
and the option's choices come from the table."""

from __future__ import annotations

from pathlib import Path

from pytest_vllm_perf.measure import modes
from pytest_vllm_perf.options import OPTIONS


class _Pool:
    """A stand-in for ``ServerPool``: records each boot asked for, returns a label."""

    def __init__(self) -> None:
        self.asked: list[tuple[object, ...]] = []

    def get(self, profile: object, slot: str = "main", python: str | None = None) -> str:
        self.asked.append((profile, slot, python))
        return f"{profile}@{slot}"


def _built(name: str) -> tuple[_Pool, modes.Mode]:
    pool = _Pool()
    found = modes.AB_MODES[name].build(
        pool,
        "server",
        "base",
        "/venv/python",
        "mine",
        "note",
        Path("b"),  # type: ignore[arg-type]
    )
    return pool, found


def test_resident_boots_the_base_beside_the_candidate_at_once():
    """Broken on purpose (the base booted on the main slot), the slot check fails."""
    pool, resident = _built("resident")
    assert pool.asked == [("base", "base", "/venv/python")]
    assert resident.ab and resident.name == "resident"
    assert (resident.base, resident.candidate) == ("base@base", "server")  # type: ignore[attr-defined]


def test_sequential_boots_nothing_until_a_side_is_measured_then_one_slot():
    """Booted in turn, each side evicts the other from the one slot when its passes
    come (``measure.ab.blocks``): building the mode boots nothing."""
    pool, sequential = _built("sequential")
    assert pool.asked == [] and sequential.ab and sequential.name == "sequential"
    assert sequential.base() == "base@main"  # type: ignore[attr-defined]
    assert sequential.candidate() == "mine@main"  # type: ignore[attr-defined]
    assert pool.asked == [("base", "main", "/venv/python"), ("mine", "main", None)]


def test_the_option_offers_exactly_the_modes_of_the_table():
    (option,) = [o for o in OPTIONS if o.ini == "vllm_ab_mode"]
    for name in modes.AB_MODES:
        assert option.convert(name, "--vllm-ab-mode") == name
    stored = modes.Stored("server", Path("b"))  # type: ignore[arg-type]
    assert not stored.ab and stored.name == "stored"
