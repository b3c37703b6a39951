"""`python -m storage.sync`: see storage/sync/cli.py."""

import signal
import sys
import threading

# A checkpoint sidecar may be told to stop while Python is still importing boto3 (~1 s):
# remember the signal now, so the final push still happens.
stop = threading.Event()
if "--every" in sys.argv:
    # SIGINT's first: SIGTERM's handler, which the kernel shows in /proc/<pid>/status, then
    # tells that both are in place (tests/storage/test_sync_cli.py waits for it).
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())

from storage.sync.cli import main  # noqa: E402 - after the handlers, on purpose

sys.exit(main(stop=stop))
