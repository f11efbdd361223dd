"""The package's version, which model folders and run folders record."""

__version__ = "0.1.0"
