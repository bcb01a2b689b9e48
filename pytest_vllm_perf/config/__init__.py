"""What a user declares: tuning profiles and workloads, read and validated."""
