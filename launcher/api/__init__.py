"""The API's types only: the MultiWorkerJob spec (`spec`), its Status (`status`), the custom
resource's identity (`identity`) and the cross-field rule table (`rules`).

Every other part reads and writes these: `launcher.core.load` loads and validates a spec,
`launcher.core.render` renders it, the operator stores a `Status`, the CLI reads one. Nothing
here imports another part of the launcher (an import contract in .importlinter holds it).
"""
