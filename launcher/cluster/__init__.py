"""The Kubernetes API edge: `client` (the only importer of `kubernetes`; the thin `Cluster`
handle), and what tflaunch does with it: `apply`, `watch`, `logs`, `find`, `custom`. The pure
readers of what comes back are here too: `status` (what a job is doing) and `doctor` (why it
may not train). This file imports nothing, so that those stay cheap to import."""
