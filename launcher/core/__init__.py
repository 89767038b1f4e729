"""The pure core: spec -> tfconfig -> render, and the names, labels, errors and trainer
contract they share. No Kubernetes client, no TensorFlow, no other launcher part."""
