import os

import pytest
from hypothesis import settings

# "ci" runs more examples; both stay well inside the suite's time budget.
settings.register_profile("default", max_examples=300, deadline=None)
settings.register_profile("ci", max_examples=1000, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture(scope="session")
def runtime():
    """The Vulkan runtime plugin, probed once: skipped locally without it, a failure in CI (CI=true)."""
    from layout_solver.vulkan.runtime import VulkanRuntimeUnavailable, locate_runtime, probe

    try:
        lib = locate_runtime()
        probe(lib)
    except VulkanRuntimeUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Vulkan execution tests: {exc}")
        pytest.skip(str(exc))
    return lib
