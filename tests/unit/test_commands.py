"""The ``vllm-perf`` command table: bare, it lists the commands and exits 0; an unknown
command is a one-line error (exit 4)."""

from __future__ import annotations

from pytest_vllm_perf import __main__ as command


def test_bare_vllm_perf_lists_the_commands_and_exits_0(capsys):
    """It exited 4, as a usage error, when a new user asked what there is."""
    assert command.main([]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {name} " in listed for name in command.COMMANDS)
    assert command.main(["--help"]) == 0


def test_an_unknown_command_is_one_line_exit_4(capsys):
    assert command.main(["nosuch"]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"vllm-perf: unknown command 'nosuch'; commands: {', '.join(command.COMMANDS)}"]
