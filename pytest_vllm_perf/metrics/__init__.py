"""Metrics: the values of a pass, computed from its request records and counters, and the
per-pass record a verdict and the store read (``Passes``). The names, units and
statistics of the metrics are the registry's (``core.registry``); nothing here infers."""
