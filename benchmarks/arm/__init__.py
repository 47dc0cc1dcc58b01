"""Benchmarks of the Arm Ethos-U stage."""
