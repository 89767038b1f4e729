"""The `tflaunch` command line: `main` (the click group and the one place that maps errors to
exit codes), one module per command family, and the shared `options`."""
