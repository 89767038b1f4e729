"""Shared test configuration. Suites: core/, local/, trainer/, cluster/, operator/, infra/, e2e/."""
