"""The server: embedded models, hardware facts, one vLLM process group at a time."""
