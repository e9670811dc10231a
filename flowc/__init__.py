"""flowc: an ahead-of-time compiler for machine-learning dataflow graphs."""

__version__ = "0.1.0"
