"""The operators' read side and manual actions: ``why``, ``budget status`` and its
plot, and ``quarantine list|resume|reset``.

These are commands an operator runs, not code that runs in slurmctld, on a node or in
the daemon's cycle: they read what the daemon, the hooks and submitd recorded, and
reuse their boundaries (``hooks.wiring``) rather than each having its own.
"""
