"""Loaders for public cluster traces (shared/data)."""
