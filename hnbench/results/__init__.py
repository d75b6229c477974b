"""Results: the record and its upgrades, per-query files, comparison and paired tests, published numbers, leaderboards."""
