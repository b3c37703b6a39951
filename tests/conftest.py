pytest_plugins = [
    "tests.fixtures.panel",
]
