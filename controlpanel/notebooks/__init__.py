"""Notebooks: a workload kind (controlpanel/kinds.py), an editor in the browser that runs until
stopped (or idle) and keeps its workspace and its address across starts."""
