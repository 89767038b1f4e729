"""Shared test configuration. Suites: core/, trainer/, cluster/, operator/, infra/."""
