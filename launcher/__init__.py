"""tflaunch: run TensorFlow MultiWorkerMirroredStrategy training on Kubernetes."""

__version__ = "0.1.0"
