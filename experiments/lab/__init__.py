"""The lab: speed benchmarks (benchmarks/) and design studies (studies/), scripts run from a checkout.

They sit beside the product, not in it: they may import the composition root (experiments/) and every
package below it, but nothing outside the lab imports them (tests/test_layering.py,
tests/test_product_boundary.py), and the installed package leaves them out (pyproject.toml). Their
figures are in experiments/findings/ (indexed by experiments/RESULTS.md), their compact result files in
experiments/results/.
"""
