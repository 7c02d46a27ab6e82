"""The privacy-budget ledger: per-user spend per dataset and epoch, append-only entries."""
