"""`tflaunch local`: the job's workers as processes on this machine (`runner`), with the same
TF_CONFIG builder as the pods, and MNIST found or fetched once for them (`dataset`)."""
