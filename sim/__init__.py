"""regionsync's deterministic simulator: N real Node runtimes over a virtual clock, a
simulated network, in-memory stores and simulated receivers, driven by one seed.

``python -m sim run SCENARIO.toml [--seed N]`` / ``python -m sim explore --seeds A..B``.
"""

from ._check import Violation
from ._loop import Deadlock, Livelock, VirtualLoop, run_virtual
from ._options import Options, load_scenario
from ._report import html_report, repro_command, text_report
from ._run import Result, run

__all__ = [
    "Deadlock",
    "Livelock",
    "Options",
    "Result",
    "VirtualLoop",
    "Violation",
    "html_report",
    "load_scenario",
    "repro_command",
    "run",
    "run_virtual",
    "text_report",
]
