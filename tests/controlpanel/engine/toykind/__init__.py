"""A toy fourth workload kind, "batch" (batch inference), kept in the tests: registered at test
time (test_fourth_kind.py), it shows that a kind is its own package plus one line in
controlpanel/kinds.py and one in INSTALLED_APPS, with no edit to the engine's files."""
