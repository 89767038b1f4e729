"""Who the custom resource is: the names by which the CLI, the operator and the CRD find it."""

from __future__ import annotations

GROUP = "tflaunch.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "MultiWorkerJob"
PLURAL = "multiworkerjobs"
SINGULAR = "multiworkerjob"
SHORT_NAMES = ("mwj",)
CRD_NAME = f"{PLURAL}.{GROUP}"
RESOURCE = f"{SINGULAR}.{GROUP}"
"""kubectl's spelling, e.g. in `multiworkerjob.tflaunch.dev/mnist deleted`."""
