"""`make run`'s machinery, no Django at import: ports it picks (`ports`), the processes it
starts and what a crash left of them (`pids`, `procfile`), and the preparation that runs in its
own process before the others start (`prepare`, which loads Django)."""
