"""Shared test helpers. Suites live in sub-folders: launcher/, trainer/, cluster/, operator/, infra/."""
