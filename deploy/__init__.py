"""Workload requests in, Kubernetes objects out (pure `make_*` functions), and the compute
backends (`kubernetes`, `local`). No Django."""
