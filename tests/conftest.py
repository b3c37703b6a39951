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
]
