"""Shared data readers: dataset splits and the on-disk feature cache (every layer may import them)."""
