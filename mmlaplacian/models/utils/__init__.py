"""Helpers of the core's modules: the truncated-normal initialisation
(:mod:`.weight_init`)."""
