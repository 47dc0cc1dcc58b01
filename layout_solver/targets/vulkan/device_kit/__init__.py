"""A Vulkan device kit: stock's and the solver's programs lowered here, run on another machine's GPU.

    layout-solver device-kit build --models convnext_stack,ds_cnn --out kit   # here (executorch, a compiler)
    bash kit/run.sh kit-results.tgz                                          # on the GPU machine: no Python needed
    layout-solver device-kit read kit                                        # here: table and measured profile

`build` (build.py) lowers each model's stock program and the solver's under each objective, adds the calibration
probes, and compiles the native runner (runner.cpp) against the executorch wheel's runtime; `run.sh` runs
outputs, paired timings and probe profiles; `read` (read.py) turns the results into a table of paired ratios and
a profile in `calibrate vulkan`'s format, which a second kit (`--objective PROFILE.json`) prices with.
`manifest.py` is what the kit records (kit.json).
"""

from layout_solver.targets.vulkan.device_kit.build import KitError, build
from layout_solver.targets.vulkan.device_kit.read import read

__all__ = ["KitError", "build", "read"]
