"""The serving simulator: named systems on the paper GPU, runs, goodput and comparisons."""
