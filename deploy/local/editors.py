"""Which notebook editors this machine can serve (the local backend runs them from here)."""

from __future__ import annotations

import importlib.util
import shutil

from deploy.types import Editor


def editor_problem(editor: Editor) -> str:
    """Why `editor` cannot start on this machine, or '': the panel's notebook form asks
    before a notebook is created, the local backend again before it starts one."""
    if editor is Editor.VSCODE and shutil.which("code-server") is None:
        # Checked when this was written: PyPI has no code-server, and npm's code-server
        # requires Node.js 24 and builds VS Code's native modules in its postinstall script.
        return (
            "VS Code (code-server) is not installed on this machine: there is no code-server "
            "on its PATH, and the package registries it installs from do not provide one "
            "(PyPI has none; the npm package requires Node.js 24 and compiles native modules "
            "at install); choose JupyterLab, or run notebooks on the Kubernetes backend"
        )
    if editor is Editor.JUPYTERLAB and importlib.util.find_spec("jupyterlab") is None:
        return "JupyterLab is not installed in this environment (pip install jupyterlab)"
    return ""
