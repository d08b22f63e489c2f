"""Adapters that plug the backbone into other frameworks: :mod:`.openmmlab`,
imported by ``import mmlaplacian`` when mmengine is installed, and
:mod:`.timm_models`, imported by its users (``import
mmlaplacian.adapters.timm_models`` registers the variants with timm)."""
