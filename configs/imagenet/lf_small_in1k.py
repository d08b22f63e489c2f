# LaplacianFormer-Small ImageNet-1k pretraining, lf_tiny_in1k.py's recipe.
_base_ = './lf_tiny_in1k.py'

model = dict(backbone=dict(arch='small'))
