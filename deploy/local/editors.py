"""Which notebook editors this machine can serve (the local backend runs them from here)."""

from __future__ import annotations

import importlib.util
import shutil

from deploy.types import Editor


def editor_problem(editor: Editor) -> str:
    """Why `editor` cannot start on this machine, or ''."""
    if editor is Editor.VSCODE and shutil.which("code-server") is None:
        return (
            "VS Code (code-server) is not installed on this machine, and no package registry "
            "this panel installs from ships it; choose JupyterLab, or run notebooks on the "
            "Kubernetes backend"
        )
    if editor is Editor.JUPYTERLAB and importlib.util.find_spec("jupyterlab") is None:
        return "JupyterLab is not installed in this environment (pip install jupyterlab)"
    return ""
