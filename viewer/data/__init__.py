"""Datasets, vocabulary and the on-disk feature cache used by training and evaluation."""
