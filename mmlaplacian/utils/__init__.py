"""Utilities around the model: FLOP counting (:mod:`.flops`,
:mod:`.flop_handles`) and the log of the core (:mod:`.logging`)."""
