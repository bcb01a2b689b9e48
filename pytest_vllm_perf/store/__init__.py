"""The stores: baselines and capacity searches (JSON), reports read back, the history
(CSV), one naming rule (``naming``) and where a run came from (``provenance``).
Plain files, written atomically; nothing here infers: the verdict reads what they hold."""
