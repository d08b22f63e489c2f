# The backbone of the test configs: every part of LaplacianFormer-Tiny (four
# stages, Laplacian attention in stages 1-3 and softmax attention in stage 4,
# 32 dims per head) at half its width and with one block per stage. The tests
# exercise the tools, the runner and the launchers, whose training runs it
# makes cheaper (in make test, the segmentation placement run took 22
# CPU-seconds instead of 35, the kill chain 59 instead of 69); the Tiny
# itself is built and run by tests/detection/test_configs.py,
# tests/backbone/, the real-COCO tests and the README examples. A config takes it with this file among its bases and
# `backbone=dict(arch={{_base_.narrow_arch}})`; its neck's `in_channels` are
# narrow_channels (strides 4 to 32) or narrow_channels_s8 (strides 8 to 32).
narrow_arch = dict(
    _delete_=True,
    embed_dims=[32, 64, 160, 256],
    depths=[1, 1, 1, 1],
    num_heads=[1, 2, 5, 8])
narrow_channels = narrow_arch['embed_dims']
narrow_channels_s8 = narrow_channels[1:]
