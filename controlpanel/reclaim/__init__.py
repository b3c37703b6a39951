"""No GPU held idle (issue 31): a project's policy for GPUs that do nothing (below X %
utilisation for N minutes: warn the owner, then, after a grace period, act as the workload's
kind allows), judged by what the GPUs do, from the DCGM samples Prometheus keeps; and what idle
GPUs cost, priced from the billing ledger, for the dashboards."""
