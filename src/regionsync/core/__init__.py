"""Pure core of regionsync: decisions from ``now`` and inputs; never I/O, never awaits."""
