"""`ajuste bucket list|create|attach|delete` and `ajuste bucket object list|upload|download|delete`.

A bucket is named `NAME` or `NAME@ALIAS` (the datastore; found from your project's buckets
when omitted), and a place in it like a volume spec: `NAME[@ALIAS][/PREFIX]`.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from controlpanel.cli import transfers
from controlpanel.cli.client import Api, ApiError, state
from controlpanel.cli.output import emit, human_size, output_option, wants_json

BUCKET_COLUMNS = [
    ("NAME", "name"),
    ("DATASTORE", "datastore"),
    ("OBJECTS", "object_count"),
    ("SIZE", "size"),
    ("ORIGIN", "origin"),
    ("STATE", "state"),
    ("CREATED", "created_at"),
]
OBJECT_COLUMNS = [
    ("KEY", "key"),
    ("SIZE", "size_text"),
    ("LAST MODIFIED", "last_modified"),
    ("ETAG", "etag"),
]
DELETE_BATCH = 1000


def split_ref(ref: str) -> tuple[str, str | None, str]:
    """`name@ALIAS/some/prefix` -> (name, ALIAS, 'some/prefix'); the alias may be omitted."""
    head, _, prefix = ref.partition("/")
    name, _, alias = head.partition("@")
    if not name:
        raise click.BadParameter(f"{ref!r} names no bucket (expected NAME[@ALIAS][/PATH])")
    return name, alias or None, prefix


def resolve(api: Api, name: str, alias: str | None) -> str:
    """The API path of a bucket of the project (`buckets/<alias>/<name>/`)."""
    if alias:
        return transfers.bucket_path(alias, name)
    matches = [b for b in api.paginate("buckets/") if b["name"] == name]
    if not matches:
        raise ApiError(404, f"your project has no bucket named {name}")
    if len(matches) > 1:
        raise click.BadParameter(f"{name} exists on several datastores: write {name}@ALIAS")
    return transfers.bucket_path(matches[0]["datastore"], name)


@click.group("bucket")
def bucket() -> None:
    """Buckets of your project (S3-compatible object storage)."""


@bucket.command("list")
@output_option
def bucket_list() -> None:
    """List the project's buckets with their object count and size."""
    rows = state().api().paginate("buckets/")
    for row in rows:
        row["size"] = human_size(row.get("total_size"))
    emit(rows, BUCKET_COLUMNS)


def _add(ref: str, path: str, verb: str) -> None:
    name, alias, prefix = split_ref(ref)
    if prefix:
        raise click.BadParameter(f"a bucket name has no '/': {ref!r}")
    body = {"name": name, **({"datastore": alias} if alias else {})}
    created = state().api().post(path, body)
    emit(created, message=f"{verb} {created['name']}@{created['datastore']}")


@bucket.command("create")
@click.argument("ref", metavar="NAME[@ALIAS]")
@output_option
def bucket_create(ref: str) -> None:
    """Create a bucket (on the default datastore unless @ALIAS is given)."""
    _add(ref, "buckets/", "created")


@bucket.command("attach")
@click.argument("ref", metavar="NAME[@ALIAS]")
@output_option
def bucket_attach(ref: str) -> None:
    """Attach a bucket that already exists on the datastore to the project."""
    _add(ref, "buckets/attach/", "attached")


@bucket.command("delete")
@click.argument("ref", metavar="NAME[@ALIAS]")
@click.option("--empty", is_flag=True, help="Delete every object in it first.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--wait/--no-wait", default=True, help="Wait until an emptied bucket is gone.")
@output_option
def bucket_delete(ref: str, empty: bool, yes: bool, wait: bool) -> None:
    """Delete a bucket (an attached one is only detached). Refused while it holds objects,
    unless --empty."""
    api = state().api()
    name, alias, _ = split_ref(ref)
    path = resolve(api, name, alias)
    if empty and not yes:
        click.confirm(f"Delete {name} and every object in it?", abort=True, err=True)
    answer = api.call("DELETE", path, params={"empty": "true"} if empty else {})
    if answer is not None and wait:
        _wait_gone(api, path)
    gone = answer is None or wait
    emit(
        {"name": name, "deleted": gone},
        message=f"deleted {name}" if gone else f"emptying {name} (it is deleted once empty)",
    )


def _wait_gone(api: Api, path: str, timeout: float = 3600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            row = api.get(path)
        except ApiError as error:
            if error.status == 404:
                return
            raise
        if row["state"] == "failed":
            raise ApiError(0, f"emptying failed: {row['state_message']}")
        time.sleep(1)
    raise ApiError(0, "still emptying; check again with `ajuste bucket list`")


@bucket.group("object")
def object_group() -> None:
    """Objects in a bucket: list, upload, download, delete."""


@object_group.command("list")
@click.argument("ref", metavar="NAME[@ALIAS][/PREFIX]")
@click.option("-r", "--recursive", is_flag=True, help="Every key under the prefix, no folders.")
@output_option
def object_list(ref: str, recursive: bool) -> None:
    """List objects and folders under a prefix (every page)."""
    api = state().api()
    name, alias, prefix = split_ref(ref)
    path = resolve(api, name, alias)
    folders: list[str] = []
    found: list[dict] = []
    token = None
    while True:
        page = api.get(
            path + "objects/", prefix=prefix, token=token, delimiter="" if recursive else "/"
        )
        folders.extend(page["prefixes"])
        found.extend(page["objects"])
        token = page.get("next_token")
        if not token:
            break
    if wants_json():
        emit({"prefixes": folders, "objects": found})
        return
    rows = [{"key": folder, "size_text": "DIR"} for folder in folders]
    rows += [{**item, "size_text": str(item["size"])} for item in found]
    emit(rows, OBJECT_COLUMNS)


@object_group.command("upload")
@click.argument("dest", metavar="NAME[@ALIAS][/PREFIX]")
@click.argument(
    "sources",
    nargs=-1,
    required=True,
    metavar="PATH...",
    type=click.Path(exists=True, path_type=Path),
)
@output_option
def object_upload(dest: str, sources: tuple[Path, ...]) -> None:
    """Upload files and folders under PREFIX (a folder keeps its name: PREFIX/dir/a.txt).
    The bucket comes first, as in `ovhai bucket object upload`."""
    api = state().api()
    name, alias, prefix = split_ref(dest)
    path = resolve(api, name, alias)
    base = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
    plan = _upload_plan(sources, base)
    total = sum(file.stat().st_size for file, _ in plan)
    with transfers.Progress(
        total, f"uploading {len(plan)} file(s)", enabled=None if not wants_json() else False
    ) as progress:
        done = [transfers.upload_file(api, path, file, key, progress) for file, key in plan]
    emit(done, message=f"uploaded {len(done)} file(s), {human_size(total)} to {name}")


def _upload_plan(sources: tuple[Path, ...], base: str) -> list[tuple[Path, str]]:
    plan: list[tuple[Path, str]] = []
    for source in sources:
        if source.is_dir():
            root = source.resolve()
            for file in sorted(root.rglob("*")):
                if file.is_file() and not file.is_symlink():
                    plan.append((file, f"{base}{root.name}/{file.relative_to(root).as_posix()}"))
        else:
            plan.append((source, base + source.name))
    return plan


@object_group.command("download")
@click.argument("source", metavar="NAME[@ALIAS]/KEY")
@click.argument("dest", type=click.Path(path_type=Path), default=".")
@click.option("-r", "--recursive", is_flag=True, help="KEY is a prefix: download all under it.")
@output_option
def object_download(source: str, dest: Path, recursive: bool) -> None:
    """Download one object (into DEST, a file or a folder), or a whole prefix with -r."""
    api = state().api()
    name, alias, key = split_ref(source)
    path = resolve(api, name, alias)
    if recursive or key.endswith("/") or not key or _is_folder(api, path, key):
        prefix = transfers.folder_prefix(key) if key else ""
        plan, skipped = _download_plan(api, path, prefix, dest)
    else:
        target = dest / key.rsplit("/", 1)[-1] if dest.is_dir() else dest
        plan, skipped = [(key, target, None)], []
    total = sum(size or 0 for _, _, size in plan)
    with transfers.Progress(
        total, f"downloading {len(plan)} object(s)", enabled=None if not wants_json() else False
    ) as progress:
        done = [transfers.download_object(api, path, k, target, progress) for k, target, _ in plan]
    for bad in skipped:
        click.echo(f"skipped {bad!r}: it would land outside {dest}", err=True)
    emit(done, message=f"downloaded {len(done)} object(s) to {dest}")


def _is_folder(api: Api, path: str, key: str) -> bool:
    """`runs/1/adapter` names a folder when no object has that exact key but some lie
    under `runs/1/adapter/`."""
    page = api.get(path + "objects/", prefix=key, delimiter="/", limit=1000)
    exact = any(item["key"] == key for item in page["objects"])
    return not exact and key + "/" in page["prefixes"]


def _download_plan(
    api: Api, path: str, prefix: str, dest: Path
) -> tuple[list[tuple[str, Path, int | None]], list[str]]:
    plan: list[tuple[str, Path, int | None]] = []
    skipped: list[str] = []
    cut = len(prefix) if not prefix or prefix.endswith("/") else prefix.rfind("/") + 1
    for item in transfers.list_all(api, path, prefix):
        relative = item["key"][cut:]
        if relative.endswith("/") and item["size"] == 0:
            continue  # a folder marker
        target = transfers.local_path(dest, relative)
        if target is None:
            skipped.append(item["key"])
        else:
            plan.append((item["key"], target, item["size"]))
    return plan, skipped


def _folder_keys(api: Api, path: str, key: str) -> list[str]:
    """Every key in the folder `key` (`runs/1` is `runs/1/`: never `runs/10/` or `runs/1.txt`)."""
    prefix = transfers.folder_prefix(key)
    keys = [item["key"] for item in transfers.list_all(api, path, prefix)]
    if not keys:
        click.echo(f"nothing under {prefix!r} (-r deletes a folder's content)", err=True)
    return keys


@object_group.command("delete")
@click.argument("refs", nargs=-1, required=True, metavar="NAME[@ALIAS]/KEY...")
@click.option("-r", "--recursive", is_flag=True, help="Each KEY is a folder: delete all in it.")
@output_option
def object_delete(refs: tuple[str, ...], recursive: bool) -> None:
    """Delete objects (or, with -r, everything in folders: KEY/...)."""
    api = state().api()
    deleted: list[str] = []
    errors: list[dict] = []
    for ref in refs:
        name, alias, key = split_ref(ref)
        if not key:
            raise click.BadParameter(f"{ref!r} names no object: use `ajuste bucket delete`")
        path = resolve(api, name, alias)
        keys = _folder_keys(api, path, key) if recursive else [key]
        for start in range(0, len(keys), DELETE_BATCH):
            result = api.post(
                path + "objects/delete/", {"keys": keys[start : start + DELETE_BATCH]}
            )
            deleted += result["deleted"]
            errors += result["errors"]
    emit(
        {"deleted": deleted, "errors": errors},
        message=f"deleted {len(deleted)} object(s)" + (f", {len(errors)} failed" if errors else ""),
    )
    if errors:
        raise click.exceptions.Exit(1)
