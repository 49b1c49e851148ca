"""farm: an open, Ray-distributed evaluation farm for tool-calling coding agents."""

__version__ = "0.1.0"
