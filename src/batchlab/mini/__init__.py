"""The mini transformer (`batchlab.model`) served by the engine: generation and the seed's demo."""

from batchlab.mini.demo import demo_requests, demo_timelines
from batchlab.mini.generation import Generation, continuous_generate, sequential_generate
from batchlab.mini.sessions import MiniSessions, mini_sessions

__all__ = ["Generation", "MiniSessions", "continuous_generate", "demo_requests", "demo_timelines",
           "mini_sessions", "sequential_generate"]
