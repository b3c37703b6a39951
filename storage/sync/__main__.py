"""`python -m storage.sync`: see storage/sync/cli.py."""

import sys

from storage.sync.cli import main

sys.exit(main())
