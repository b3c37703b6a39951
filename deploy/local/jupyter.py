"""JupyterLab as the local backend starts it, without the work it does at start for nothing:

    python -P -m deploy.local.jupyter [jupyter lab options]

Two costs of importing JupyterLab are skipped here (together about 2 s of a 3 s start on a
2-vCPU machine), in this server process only (kernels and terminals are processes of their own
and see the environment unchanged):

- `jsonschema` builds ~35 Earley parsers of `rfc3987_syntax` at import, for the `iri` formats
  that no Jupyter schema uses: the module is marked absent, so that checker is not defined.
- `jupyterlab.labapp` runs `node yarn.js config` at import when node is on PATH, to learn the
  npm registry of the extension manager, which the local backend runs read-only: it is
  answered with an empty configuration (the default registry).

`-P` keeps the notebook's workspace (the working directory) off `sys.path`, so a file there
named like a module the server imports cannot replace it. Import nothing of Ajuste here.
"""

from __future__ import annotations

import sys
from typing import Any


def _no_yarn_config(_logger: object) -> dict[str, dict[str, Any]]:
    return {"yarn config": {}, "npm config": {}}


def main() -> int:
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
    import jupyterlab.commands

    if hasattr(jupyterlab.commands, "_yarn_config"):
        jupyterlab.commands._yarn_config = _no_yarn_config
    from jupyterlab.labapp import main as lab_main

    lab_main(argv=sys.argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
