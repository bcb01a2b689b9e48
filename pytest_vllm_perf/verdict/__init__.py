"""Statistics, thresholds and regression verdicts over plain records; nothing here runs a server."""
