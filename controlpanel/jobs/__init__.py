"""Training jobs: a workload kind (controlpanel/kinds.py) that runs its command once, and again
on "run again"."""
