"""The MultiWorkerJob operator: `crd` (the resource and its status model), the pure decisions
(`observe` -> `reconcile.decide` -> a `Plan`, with `objects`, `children` and `conditions`),
and `controller`, the kopf edge that carries plans out through `launcher.cluster`. This file
imports nothing, so that the pure parts load without kopf."""
