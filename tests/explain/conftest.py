import pytest


@pytest.fixture(scope="session")
def explained_convnext_xnnpack(tmp_path_factory):
    """convnext_stack explained on XNNPACK once per test process (lowered both ways, timed briefly), shared by the
    overlay test and the browser test."""
    from layout_solver.zoo.runner import explain_named

    out = tmp_path_factory.mktemp("explained-convnext-xnnpack")
    return explain_named("convnext_stack", "xnnpack", out, time_limit=10, threads=(1,), rounds=3), out
