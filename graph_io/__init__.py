"""Graphs in and out: ExecuTorch programs to plain graph descriptions, and
solver assignments written back into fx graphs. Never imports layout_solver."""
