"""Prometheus metrics (#18): `store` is where every process writes (Redis), `collectors` what
/metrics reads at scrape time, `http` the request timing and the endpoint, `celery_signals`
the task runs."""
