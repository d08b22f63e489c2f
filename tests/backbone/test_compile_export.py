"""PyTorch's compilers see the whole backbone: ``torch.compile(fullgraph=
True)`` in eval and in training, and ``torch.export`` of the eval model,
each equal to eager to float rounding."""
import copy

import pytest
import torch

from mmlaplacian import LaplacianFormer

# 96x128: stage 1 has 768 tokens (landmarks pooled), stage 3 48 (the
# tokens are the landmarks): both branches of the attention are traced.
IMAGE = (1, 3, 96, 128)


@pytest.fixture(scope='module')
def tiny():
    torch.manual_seed(0)
    return LaplacianFormer('tiny', drop_path_rate=0.).eval()


def image(seed=0):
    return torch.randn(IMAGE, generator=torch.Generator().manual_seed(seed))


def assert_maps_close(got, expected):
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_fullgraph_compile_in_eval_equals_eager(tiny):
    x = image()
    with torch.no_grad():
        expected = tiny(x)
        got = torch.compile(tiny, fullgraph=True, backend='aot_eager')(x)
    assert_maps_close(got, expected)


def test_fullgraph_compile_in_training_equals_eager(tiny):
    """Forward and backward (BatchNorm in training mode, the ops' registered
    backwards): loss and every parameter gradient equal eager's."""
    eager, compiled = copy.deepcopy(tiny).train(), copy.deepcopy(tiny).train()
    x = image(1)

    def loss_of(model):
        return sum(out.square().mean() for out in model(x))

    eager_loss = loss_of(eager)
    eager_loss.backward()
    loss = loss_of(torch.compile(compiled, fullgraph=True,
                                 backend='aot_eager'))
    loss.backward()
    torch.testing.assert_close(loss, eager_loss)
    for (name, p), q in zip(compiled.named_parameters(), eager.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6,
                                       msg=name)


def test_export_of_eval_backbone_equals_eager(tiny):
    x = image(2)
    program = torch.export.export(tiny, (x, ))
    targets = {str(node.target) for node in program.graph.nodes
               if node.op == 'call_function'}
    assert 'mmlaplacian.laplace_kernel.default' in targets
    assert 'mmlaplacian.newton_schulz_inverse.default' in targets
    with torch.no_grad():
        expected = tiny(x)
    assert_maps_close(program.module()(x), expected)


def test_inductor_with_automatic_dynamic_shapes_follows_the_grid():
    """``torch.compile`` with its defaults: from the second size on, dynamo
    makes the sizes symbolic. The landmark grid then stays a constant of
    the graph (guarded), so inductor lowers it, and a size with another
    grid compiles anew instead of reusing a wrong one."""
    from mmlaplacian.models.layers import LaplacianAttention, landmark_grid
    torch.manual_seed(0)
    attn = LaplacianAttention(16, num_heads=1, num_landmarks=9).eval()
    compiled = torch.compile(attn)
    # (20, 30) and (22, 34): grid 2x4; (30, 20): grid 3x3.
    sizes = [(20, 30), (22, 34), (30, 20)]
    assert len({landmark_grid(hw, 9) for hw in sizes}) == 2
    for height, width in sizes:
        x = torch.randn(1, height * width, 16)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x, (height, width)),
                                       attn(x, (height, width)),
                                       rtol=1e-4, atol=1e-5)
