"""The sandboxed kernel: isolation, budgets, the kernel host and its client, forks,
the oracle's worker.
"""
