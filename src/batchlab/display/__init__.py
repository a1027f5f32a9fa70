"""Text displays for people: rich tables and ASCII timelines."""
