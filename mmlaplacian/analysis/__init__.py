"""Parameter and FLOP counting for LaplacianFormer models."""
from .attention_flops import (attention_module_flops,
                              laplacian_attention_flops,
                              softmax_attention_flops)
from .complexity import (ComplexityReport, backbone_complexity,
                         classifier_complexity)
from .model_flops import ModelFlops, count_model_flops

__all__ = [
    'attention_module_flops', 'laplacian_attention_flops',
    'softmax_attention_flops', 'ComplexityReport', 'backbone_complexity',
    'classifier_complexity', 'ModelFlops', 'count_model_flops'
]
