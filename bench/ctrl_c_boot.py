"""How long Ctrl-C during a vLLM boot takes to end the session, on the CPU engine.

Each run starts ``pytest`` on a one-test folder whose test boots the embedded model,
waits for the ``booting vLLM`` line, waits ``--after`` seconds more (inside the boot),
sends SIGINT to pytest and times until pytest has exited and no process of the boot's
session is left. ``--burners N`` runs N CPU-bound processes beside it (a loaded
machine). Writes the times and the load average to ``--out``.

    .venv/bin/python bench/ctrl_c_boot.py --runs 3 --burners 1 \
        --out bench/results/cpu/ctrl-c-during-boot.txt
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEST = """
import pytest

@pytest.mark.vllm_perf(workload="decode", duration_s=600, chat={"users": 2})
def test_slow(vllm_perf):
    vllm_perf.run()
"""


def _session_alive(sid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            return True
    return False


def _ours(cmdline: Path, folder: Path) -> bool:
    """A launcher of this run's boot: its model sits in the folder's cache (another
    job's servers on the machine are not ours to wait for)."""
    try:
        text = cmdline.read_bytes()
    except OSError:
        return False
    return b"serving.launch" in text and str(folder).encode() in text


def one(after_s: float) -> tuple[float, int, int]:
    folder = Path(tempfile.mkdtemp(prefix="ctrl-c-"))
    (folder / "test_slow.py").write_text(TEST)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider", "test_slow.py"],
        cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler),
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if "booting vLLM" in line:
            break
    time.sleep(after_s)
    servers = [
        int(p.name) for p in Path("/proc").glob("[0-9]*")
        if (p / "cmdline").exists() and _ours(p / "cmdline", folder)
    ]  # fmt: skip
    sessions = {os.getsid(pid) for pid in servers if Path(f"/proc/{pid}").exists()}
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=300)
    while any(_session_alive(s) for s in sessions):
        time.sleep(0.1)
    return time.monotonic() - sent, proc.returncode, len(servers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--burners", type=int, default=1)
    parser.add_argument("--after", type=float, default=3.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    burn = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burners)
    ]
    lines = [f"$ .venv/bin/python bench/ctrl_c_boot.py --runs {args.runs} --burners "
             f"{args.burners} --after {args.after:g} --out {args.out}"]  # fmt: skip
    try:
        for k in range(args.runs):
            seconds, code, booting = one(args.after)
            load = Path("/proc/loadavg").read_text().split()[:3]
            lines.append(f"run {k + 1}: SIGINT {args.after:g} s into the boot -> session "
                         f"ended, the boot's {booting} launcher(s) gone in {seconds:.1f} s, exit "
                         f"{code}; load average {' '.join(load)}")  # fmt: skip
            print(lines[-1], flush=True)
    finally:
        for b in burn:
            b.kill()
    args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
