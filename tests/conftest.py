import os

from hypothesis import settings

# "ci" runs more examples; both stay well inside the suite's time budget.
settings.register_profile("default", max_examples=300, deadline=None)
settings.register_profile("ci", max_examples=1000, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "default")
