"""Speed measurements: `make bench` (suite.py: one report, every figure against a baseline of the same run)
and the scripts it reuses or that measure more (retrieval.py, scaling.py, prefix_reuse.py). Nothing in the
product imports them (tests/test_product_boundary.py); design studies live in experiments/lab/studies."""
