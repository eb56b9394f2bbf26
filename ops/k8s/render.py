"""Render a kustomization of ops/k8s the way `kubectl kustomize` does, for the subset the farm's
manifests use, so that `make test` validates what `kubectl apply -k` applies with no kustomize binary
(none installs from PyPI, and Debian's kubectl is too old to know `labels`).

The subset, and nothing else (any other field of a kustomization is refused, naming it):

- `resources`: YAML files (one or more documents each) and directories holding a kustomization.yaml,
  rendered first; two resources of the same kind, namespace and name are refused, as kustomize does.
- `namespace`: set on every namespaced resource (a Namespace object and other cluster-scoped kinds
  keep none).
- `labels`: each entry's `pairs` added to every resource's metadata.labels, never to selectors or
  pod templates (`includeSelectors` and `includeTemplates` must be absent or false).

    python ops/k8s/render.py ops/k8s/overlays/in-cluster     # the documents, as one YAML stream
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

__all__ = ["CLUSTER_SCOPED_KINDS", "KustomizeError", "render"]

KUSTOMIZATION = "kustomization.yaml"
SUPPORTED_FIELDS = frozenset({"apiVersion", "kind", "namespace", "labels", "resources"})
# The kinds without a namespace among those these manifests could hold.
CLUSTER_SCOPED_KINDS = frozenset(
    {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PersistentVolume"}
)


class KustomizeError(ValueError):
    """A kustomization outside the subset, or resources kustomize would refuse."""


def _read_documents(path: Path) -> list[dict[str, Any]]:
    documents = []
    for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if document is None:
            continue
        if not isinstance(document, dict) or not document.get("kind") or not document.get("metadata"):
            raise KustomizeError(f"{path}: a document without kind and metadata: expected a resource")
        documents.append(document)
    return documents


def _label_pairs(entries: Any, where: Path) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for entry in entries or []:
        for option in ("includeSelectors", "includeTemplates"):
            if entry.get(option):
                raise KustomizeError(f"{where}: labels.{option}: not rendered here; expected it absent")
        unknown = set(entry) - {"pairs", "includeSelectors", "includeTemplates"}
        if unknown:
            raise KustomizeError(f"{where}: labels: unknown field(s) {', '.join(sorted(unknown))}")
        pairs.update({str(k): str(v) for k, v in (entry.get("pairs") or {}).items()})
    return pairs


def render(directory: Path) -> list[dict[str, Any]]:
    """The resources a kustomization directory renders to, in the order its resources list them.

    Raises:
        KustomizeError: no kustomization.yaml, a field outside the subset, a missing resource, or two
            resources with one id.
    """
    directory = Path(directory)
    path = directory / KUSTOMIZATION
    if not path.is_file():
        raise KustomizeError(f"{directory}: no {KUSTOMIZATION}")
    kustomization = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    unknown = set(kustomization) - SUPPORTED_FIELDS
    if unknown:
        raise KustomizeError(
            f"{path}: {', '.join(sorted(unknown))}: not in the subset ops/k8s/render.py renders; "
            f"expected only {', '.join(sorted(SUPPORTED_FIELDS))}"
        )
    resources: list[dict[str, Any]] = []
    for entry in kustomization.get("resources") or []:
        target = directory / entry
        if target.is_dir():
            resources.extend(render(target))
        elif target.is_file():
            resources.extend(_read_documents(target))
        else:
            raise KustomizeError(f"{path}: resources: {entry} does not exist")
    namespace = kustomization.get("namespace")
    pairs = _label_pairs(kustomization.get("labels"), path)
    seen: set[tuple[str, str, str]] = set()
    for resource in resources:
        metadata = resource["metadata"]
        if namespace and resource["kind"] not in CLUSTER_SCOPED_KINDS:
            metadata["namespace"] = namespace
        if pairs:
            metadata["labels"] = {**(metadata.get("labels") or {}), **pairs}
        key = (resource["kind"], metadata.get("namespace", ""), metadata["name"])
        if key in seen:
            raise KustomizeError(f"{path}: two resources are {key[0]} {key[2]}: expected one")
        seen.add(key)
    return resources


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python ops/k8s/render.py DIRECTORY (one holding a kustomization.yaml)", file=sys.stderr)
        return 2
    try:
        documents = render(Path(argv[0]))
    except (KustomizeError, yaml.YAMLError, OSError) as exc:
        print(f"render: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump_all(documents, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
