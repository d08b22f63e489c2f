# The test RetinaNet with a classifier initialised to spread its scores:
# RetinaNet's usual initialisation gives every (anchor, class) pair a score
# of 0.0100 +- 1e-6 before training, and near-ties that small make any two
# runtimes order detections differently. Spread scores make the comparison
# of exported and eager detections meaningful without a trained model.
_base_ = '../../detection/configs/retinanet_synthetic.py'

model = dict(bbox_head=dict(init_cfg=dict(
    type='Normal',
    layer='Conv2d',
    std=0.01,
    override=dict(type='Normal', name='retina_cls', std=0.3, bias_prob=0.05))))
