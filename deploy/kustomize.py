"""A small Python equivalent of `kustomize build` for the subset k8s/ uses, since the kustomize
binary is not installable from PyPI, Debian or npm:

    python -m deploy.kustomize k8s/ > ajuste.yaml     (same objects as `kubectl kustomize k8s/`)

Supported kustomization fields: `resources` (files and directories), `namespace`, `labels`
(`pairs`, `includeSelectors`, `includeTemplates`) and `images` (`name`, `newName`, `newTag`,
`digest`). Anything else is refused rather than silently ignored.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
SUPPORTED = {"apiVersion", "kind", "namespace", "labels", "images", "resources"}
CLUSTER_KINDS = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "StorageClass",
    "IngressClass",
    "PriorityClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


class KustomizeError(ValueError):
    """A kustomization this renderer cannot build."""


def render(directory: Path) -> list[Obj]:
    """The objects the kustomization in `directory` produces."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text()) or {}
    unknown = set(kustomization) - SUPPORTED
    if unknown:
        raise KustomizeError(f"{directory}: unsupported kustomization fields {sorted(unknown)}")
    objects = [
        obj for entry in kustomization.get("resources", []) for obj in _load(directory / entry)
    ]
    for obj in objects:
        if kustomization.get("namespace") and obj["kind"] not in CLUSTER_KINDS:
            obj["metadata"]["namespace"] = kustomization["namespace"]
        for label_set in kustomization.get("labels", []):
            _label(obj, label_set)
        for image in kustomization.get("images", []):
            _retag(obj, image)
    return objects


def dump(objects: list[Obj]) -> str:
    """Objects as one multi-document YAML stream."""
    return yaml.safe_dump_all(objects, sort_keys=False)


def _load(path: Path) -> Iterator[Obj]:
    if path.is_dir():
        yield from render(path)
        return
    for document in yaml.safe_load_all(path.read_text()):
        if document:
            yield copy.deepcopy(document)


def _label(obj: Obj, label_set: Obj) -> None:
    pairs = dict(label_set.get("pairs") or {})
    obj["metadata"].setdefault("labels", {}).update(pairs)
    spec = obj.get("spec") or {}
    if label_set.get("includeSelectors"):
        if obj["kind"] == "Service":
            spec.setdefault("selector", {}).update(pairs)
        elif obj["kind"] in WORKLOAD_KINDS and obj["kind"] != "Job":
            spec.setdefault("selector", {}).setdefault("matchLabels", {}).update(pairs)
    if label_set.get("includeSelectors") or label_set.get("includeTemplates"):
        template = spec.get("template")
        if obj["kind"] in WORKLOAD_KINDS and template is not None:
            template.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)


def _retag(obj: Obj, image: Obj) -> None:
    for container in _containers(obj):
        name, tag = _split_image(container.get("image", ""))
        if name != image["name"]:
            continue
        new_name = image.get("newName", name)
        if image.get("digest"):
            container["image"] = f"{new_name}@{image['digest']}"
        else:
            new_tag = image.get("newTag", tag)
            container["image"] = f"{new_name}:{new_tag}" if new_tag else new_name


def _containers(obj: Obj) -> Iterator[Obj]:
    spec = obj.get("spec") or {}
    pod = spec if obj["kind"] == "Pod" else (spec.get("template") or {}).get("spec") or {}
    if obj["kind"] == "CronJob":
        pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    yield from pod.get("initContainers") or []
    yield from pod.get("containers") or []


def _split_image(image: str) -> tuple[str, str]:
    """('registry/name', 'tag'); a port in the registry is not a tag."""
    name, _, _digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :]
    return name, ""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    sys.stdout.write(dump(render(Path(args[0] if args else "k8s"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
