"""Print uv flags for this machine's pip settings (index, find-links, constraints).

``make setup`` installs with uv, which does not read pip's configuration: on CI's
machine the CPU torch wheel comes from a local ``find-links`` folder and a constraints
file caps its version, so uv must be given both, or it resolves another torch. Each
setting of ``pip config list`` (files and PIP_* variables alike) becomes the uv flag of
the same meaning, one per value. Standard library only: it runs before anything is
installed.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


def main() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    flags: list[str] = []
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        flag = FLAGS.get(key.rsplit(".", 1)[-1])
        if flag:
            for item in shlex.split(value)[0].split() if value else []:
                flags += [flag, item]
    print(shlex.join(flags))


if __name__ == "__main__":
    main()
