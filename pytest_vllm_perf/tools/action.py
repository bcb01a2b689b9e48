"""The GitHub Action's last step: what ``vllm-perf prgate`` decided, told to GitHub.

``vllm-perf action-outputs OUT --status N`` reads the gate's ``OUT/gate.json`` and
writes the Action's outputs to ``$GITHUB_OUTPUT`` (``outcome``, ``gpu-minutes``,
``summary``, ``exit-status``), one annotation with the gate's verdict line, and
``OUT/check-run.json``: the body of a GitHub check run whose conclusion is
``success``, ``failure`` or ``neutral``. A job cannot end neutral, so the Action
posts that check run when given a token (``action.yml``).

Its exit status is the Action's: the gate's own when it failed; for an undecided
gate (exit 6 under ``--vllm-inconclusive=exit``), ``--inconclusive`` says: ``neutral``
(0, with a warning and a neutral check run), ``fail`` (6) or ``pass`` (0).
A gate that wrote no ``gate.json`` (a usage error before any step) is an ``error``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Final, Literal

from pytest_vllm_perf.core import atomic
from pytest_vllm_perf.options import INCONCLUSIVE_EXIT

__all__ = ["CONCLUSIONS", "INCONCLUSIVE_MODES", "main", "outputs"]

InconclusiveMode = Literal["neutral", "fail", "pass"]
INCONCLUSIVE_MODES: Final[tuple[InconclusiveMode, ...]] = ("neutral", "fail", "pass")
# the check run's conclusion for each outcome of the gate (GitHub's vocabulary)
CONCLUSIONS: Final = {
    "pass": "success",
    "fail": "failure",
    "inconclusive": "neutral",
    "error": "failure",
}


def outputs(out: Path, status: int) -> dict[str, str]:
    """The Action's outputs from the gate's folder and exit status."""
    found = out / "gate.json"
    if not found.is_file():
        return {"outcome": "error", "gpu-minutes": "0", "summary": "", "exit-status": str(status)}
    gate = json.loads(found.read_text(encoding="utf-8"))
    summary = out / "summary.md"
    return {
        "outcome": str(gate["outcome"]),
        "gpu-minutes": f"{float(gate['gpu_min']):g}",
        "summary": str(summary) if summary.is_file() else "",
        "exit-status": str(status),
    }


def _headline(out: Path) -> str:
    """The gate's verdict line from ``gate.json`` (not its Markdown), or a plain word."""
    found = out / "gate.json"
    if found.is_file():
        line = json.loads(found.read_text(encoding="utf-8")).get("verdict")
        if isinstance(line, str) and line:
            return line
    return "the gate wrote no verdict: read its log above"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vllm-perf action-outputs",
        description="Tell GitHub what prgate decided: outputs, an annotation, a check run body.",
    )
    parser.add_argument("out", type=Path, help="prgate's --out folder")
    parser.add_argument("--status", type=int, required=True, help="prgate's exit status")
    parser.add_argument(
        "--inconclusive",
        choices=INCONCLUSIVE_MODES,
        default="neutral",
        help="what an undecided gate makes of the step: neutral (passes, a warning and a "
        "neutral check run), fail (exit 6) or pass",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    found = outputs(args.out, args.status)
    if path := os.environ.get("GITHUB_OUTPUT"):
        with open(path, "a", encoding="utf-8") as fh:
            fh.writelines(f"{k}={v}\n" for k, v in found.items())
    outcome, headline = found["outcome"], _headline(args.out)
    check = {
        "name": "vLLM perf",
        "conclusion": CONCLUSIONS[outcome],
        "output": {"title": headline[:200], "summary": headline},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(args.out / "check-run.json", json.dumps(check, indent=2) + "\n")
    level = {"pass": "notice", "inconclusive": "warning"}.get(outcome, "error")
    print(f"::{level} title=vLLM perf::{headline}", flush=True)
    if outcome == "pass":
        return 0
    if outcome == "inconclusive":
        return {"neutral": 0, "pass": 0, "fail": INCONCLUSIVE_EXIT}[args.inconclusive]
    return args.status or 1
