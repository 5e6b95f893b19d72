"""Empirical privacy auditing: statistics, canary audits, one-run audits, faulty variants."""
