"""Conversions of a store into a new store: each in its own module."""
