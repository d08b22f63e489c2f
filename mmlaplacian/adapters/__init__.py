"""Adapters that plug the backbone into other frameworks; each is imported
only when its framework is installed (``import mmlaplacian`` does it)."""
