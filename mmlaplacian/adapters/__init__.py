"""Adapters that plug the backbone into other frameworks, each imported only
when its framework is there: :mod:`.openmmlab` by ``import mmlaplacian``
when mmengine is installed, :mod:`.timm_models` together with timm
(:mod:`.import_hooks`)."""
