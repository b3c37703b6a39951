"""The local model server says why a model folder is no model, before the loader would hide it
behind a tokenizer error (#32): that line is the app's failure reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from deploy.local.serve import model_missing


def serve(model: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-P", "-m", "deploy.local.serve", "--model", str(model)]
    argv += ["--name", "chat", "--port", "1"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_a_missing_model_folder_is_named_and_the_server_exits_2(tmp_path: Path) -> None:
    done = serve(tmp_path / "model")
    assert done.returncode == 2
    assert done.stdout.strip() == f"the model folder {tmp_path / 'model'} does not exist"
    assert "tokenizer" not in done.stdout + done.stderr


def test_an_empty_or_foreign_folder_is_no_model(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    done = serve(folder)
    assert done.returncode == 2
    assert (
        done.stdout.strip() == f"the model folder {folder} is empty: it holds no transformers model"
    )
    (folder / "notes.txt").write_text("hi")
    assert model_missing(str(folder)).endswith(
        "holds no config.json: it holds no transformers model"
    )
    (folder / "config.json").write_text("{}")
    assert model_missing(str(folder)) == ""
