"""Transformer workloads: per-shard kernels and collectives, parameter counts, memory."""
