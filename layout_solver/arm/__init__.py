"""Arm Ethos-U55 adapter (imports executorch; not the core). So far: measurement of the
stock TOSA/Vela lowering; the solver-driven memory-format stage is the Arm issue's work."""
