"""Calibration of the cost models against the real tools (Vela)."""
