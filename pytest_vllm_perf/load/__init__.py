"""The load: prompts, the streaming client, passes of a workload, server counters."""
