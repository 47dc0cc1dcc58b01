"""Hardware cost models (Ethos-U55, Vulkan): pure functions of shapes, dtypes
and layouts, with parameters in versioned data files. Never imports layout_solver."""
