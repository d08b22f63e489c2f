"""Messages of the core, to mmengine's log when it is present.

Under an OpenMMLab runner the current ``MMLogger`` writes the run's log
file, so a message about loaded weights belongs there; without mmengine the
standard ``logging`` module's ``mmlaplacian`` logger takes it.
"""
from __future__ import annotations

import importlib.util
import logging

LOGGER = logging.getLogger('mmlaplacian')


def log_info(message: str) -> None:
    """Log ``message`` at INFO level (mmengine's current logger if any)."""
    if importlib.util.find_spec('mmengine') is not None:
        from mmengine.logging import print_log
        print_log(message, logger='current')
    else:
        LOGGER.info(message)
