"""The version of tolk-core (its own module: the plugin registry reads it without importing the package root)."""
__version__ = "0.1.0"
