"""What runs inside every worker pod as `python -m trainer`.

The package is importable without TensorFlow: `preflight`, `config` and `errors` never
import it, because the environment (TF_USE_LEGACY_KERAS=1) must be fixed before the first
TensorFlow import. `data`, `model` and `train` are imported only after that.
"""
