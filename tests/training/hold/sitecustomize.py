"""A handshake for tests that interrupt a fine-tune run at a known point, with no sleep.

Put this folder first on PYTHONPATH and set TRAINING_HOLD=<event>:<step>:<fifo>: every Python
process started with that environment (torchrun's agent, each rank, a restarted rank) imports
this module at start-up, and the writer then stops right after printing that event at that
step, until the test opens <fifo> for writing and closes it (tests/training/ranks.py's Hold).
The test reads the event, acts (signals, kills) while the run cannot move on, then lets it go.
Nothing of this is in the image: the preset runs unchanged.
"""

import os

_SPEC = os.environ.get("TRAINING_HOLD", "")

if _SPEC:
    from typing import Any

    from training import reporting

    _EVENT, _STEP, _FIFO = _SPEC.split(":", 2)
    _emit = reporting.Reporter.emit

    def _held_emit(self: reporting.Reporter, event: str, **fields: Any) -> dict[str, Any]:
        obj = _emit(self, event, **fields)
        if self.enabled and event == _EVENT and fields.get("step") == int(_STEP):
            with open(_FIFO, encoding="utf-8") as gate:  # blocks until the test opens it
                gate.read()  # and returns once the test has closed it
        return obj

    reporting.Reporter.emit = _held_emit  # type: ignore[method-assign]
