"""A chaos soak across network-namespace hosts (issue 26): random, overlapping faults under a
mixed workload, then an independent checker of every byte and every acknowledgement.

``python -m bench.soak --minutes 30 --seed 7`` runs it; docs/reliability.md describes the
hosts, the workload, the fault kinds, the checks and the reports recorded so far.
"""
