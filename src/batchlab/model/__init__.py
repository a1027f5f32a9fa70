"""The numpy mini transformer: RMSNorm, RoPE, grouped-query attention, SwiGLU; selective batching."""

from batchlab.model.config import MiniConfig, tiny_config
from batchlab.model.counters import Counter
from batchlab.model.decoding import generate, greedy
from batchlab.model.forward import (StepOutput, TokenWork, forward_batch, forward_one_by_one,
                                    forward_padded)
from batchlab.model.kv_cache import KVCache
from batchlab.model.padding import PaddingWaste, padding_waste
from batchlab.model.weights import MiniModel, init_model

__all__ = ["Counter", "KVCache", "MiniConfig", "MiniModel", "PaddingWaste", "StepOutput",
           "TokenWork", "forward_batch", "forward_one_by_one", "forward_padded", "generate",
           "greedy", "init_model", "padding_waste", "tiny_config"]
