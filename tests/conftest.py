import os

from hypothesis import HealthCheck, settings

pytest_plugins = [
    "tests.fixtures.jobs",
    "tests.fixtures.k8s",
    "tests.fixtures.llm",
    "tests.fixtures.panel",
    "tests.fixtures.processes",
    "tests.fixtures.browser",
    "tests.fixtures.faults",
    "tests.fixtures.s3",
    "tests.fixtures.clock",
    "tests.fixtures.flush",
]

# Property tests in CI are deterministic: the same examples every run (derandomized, no example
# database), so a red run is red again on the same commit and a green one is not luck. Neither
# the deadline nor the slow-generation check applies there: on a loaded 2-core machine both fail
# tests that are right. A test's own @settings still win (an example count it needs, say).
# Elsewhere (HYPOTHESIS_PROFILE unset and no CI), Hypothesis's default: random, new examples.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default")
)
