"""The code version: what a saved program records, and what reading one checks (program/serving/saved.py). Its own
module, so the package's ``__init__`` (which imports ``load`` on first use, and with it program/serving/saved.py) and
program/serving/saved.py do not import each other."""

__version__ = "0.2.0"
