"""Paths shared by the sim tests."""

from pathlib import Path

SIM = Path(__file__).resolve().parents[2] / "sim"
SCENARIOS = SIM / "scenarios"
