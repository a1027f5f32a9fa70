"""batchlab: understand, simulate and measure how LLM serving batches and schedules requests."""

from batchlab.errors import InputError

__all__ = ["InputError"]
__version__ = "0.1.0"
