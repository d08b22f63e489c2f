"""LaplacianFormer-T as an ExecuTorch program lowered to XNNPACK, written
by tools/deployment/export_executorch.py or the export API, run by
ExecuTorch's runtime on this CPU, matching eager within the ONNX
tolerances; one program holding several methods. Skipped where executorch
is not installed."""
import re

import pytest
import torch

pytest.importorskip('executorch')

from mmlaplacian import LaplacianFormer  # noqa: E402
from mmlaplacian.deployment import BackboneForExport  # noqa: E402
from mmlaplacian.deployment.executorch_export import (  # noqa: E402
    export_executorch, run_executorch)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_export_tool_writes_a_backbone_program_matching_eager(
        tmp_path, load_script, capsys):
    """The tool with a checkpoint: it reports the XNNPACK subgraphs, no op
    of ours left to the portable kernels and its own check against eager;
    the program it wrote, run here, gives the checkpoint's features."""
    torch.manual_seed(0)
    backbone = LaplacianFormer('tiny', drop_path_rate=0.).eval()
    weights = tmp_path / 'lf_t.pth'
    torch.save({'state_dict': backbone.state_dict()}, weights)
    program = tmp_path / 'lf_t.pte'
    status = load_script('tools/deployment/export_executorch.py').main([
        '--arch', 'tiny', '--checkpoint',
        str(weights), '--shape', '96', '128', '--out',
        str(program)
    ])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert int(re.search(r'(\d+) XNNPACK subgraphs', printed)[1]) > 0
    portable = re.search(r'left to the portable kernels: (.*)', printed)[1]
    assert 'mmlaplacian' not in portable, portable
    assert 'ExecuTorch matches eager' in printed, printed

    module = BackboneForExport(backbone)
    image = torch.rand(1, 3, 96, 128,
                       generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = module(image)
    got = run_executorch(str(program), [image])
    assert len(got) == len(expected) == 4
    for out, ref in zip(got, expected):
        assert out.shape == ref.shape
        # The ONNX exports' feature tolerance: the largest difference
        # within 1e-4 of the map's largest magnitude.
        relative = (out - ref).abs().max() / ref.abs().max()
        assert relative <= 1e-4, relative


def test_segmentor_runs_in_executorch(tmp_path):
    """The quick start's Semantic FPN (LaplacianFormer-T) as one program:
    BGR image in, logits out, equal to mmseg's own ``predict``."""
    from mmseg.apis import init_model
    from mmseg.structures import SegDataSample

    from mmlaplacian.deployment import SegmentorForExport
    torch.manual_seed(0)
    segmentor = init_model(
        'configs/quickstart/sem_fpn_lf_tiny_synthetic_seg.py', device='cpu',
        cfg_options={'model.backbone.init_cfg': None}).eval()
    module = SegmentorForExport(segmentor)
    image = 255 * torch.rand(1, 3, 96, 128,
                             generator=torch.Generator().manual_seed(0))
    sample = SegDataSample(metainfo=dict(img_shape=(96, 128),
                                         ori_shape=(96, 128)))
    with torch.no_grad():
        data = segmentor.data_preprocessor(
            dict(inputs=[image[0]], data_samples=[sample]), False)
        predicted = segmentor.predict(**data)[0].seg_logits.data
        expected = module(image)
    assert torch.allclose(expected[0], predicted, atol=1e-5, rtol=0)
    result = export_executorch(module, image, str(tmp_path / 'seg.pte'))
    assert not [op for op in result.portable_ops if 'mmlaplacian' in op]
    got = run_executorch(result.path, [image])[0]
    assert got.shape == expected.shape
    relative = (got - expected).abs().max() / expected.abs().max()
    assert relative <= 1e-4, relative
    assert torch.equal(got.argmax(1), expected.argmax(1))


def test_one_program_holds_a_method_per_module(tmp_path):
    """The dict form: one .pte with a LaplacianAttention and a
    SoftmaxAttention method, each run by name and equal to eager; an
    unknown method is named with those the program has."""
    from mmlaplacian.deployment.export import FEATURE_RTOL
    from mmlaplacian.models.layers import LaplacianAttention, SoftmaxAttention

    class Tokens(torch.nn.Module):
        """An attention layer on a 12x12 grid of tokens."""

        def __init__(self, attention):
            super().__init__()
            self.attention = attention

        def forward(self, x):
            return self.attention(x, (12, 12))

    torch.manual_seed(0)
    modules = {
        'laplacian': Tokens(LaplacianAttention(64, num_heads=2).eval()),
        'softmax': Tokens(SoftmaxAttention(64, num_heads=2).eval()),
    }
    inputs = {name: torch.randn(1, 144, 64) for name in modules}
    result = export_executorch(
        {name: (module, (inputs[name], ))
         for name, module in modules.items()}, None,
        str(tmp_path / 'two.pte'))
    assert set(result.methods) == set(modules)
    assert all(m.delegated > 0 for m in result.methods.values())
    for name, module in modules.items():
        got = run_executorch(result.path, [inputs[name]], method=name)[0]
        with torch.no_grad():
            expected = module(inputs[name])
        relative = (got - expected).abs().max() / expected.abs().max()
        assert relative <= FEATURE_RTOL, (name, relative)
    with pytest.raises(KeyError, match="has no method 'forward'.*laplacian"):
        run_executorch(result.path, [inputs['softmax']])


def test_export_tool_refuses_a_block_budget_below_one(load_script, capsys):
    tool = load_script('tools/deployment/export_executorch.py')
    with pytest.raises(SystemExit) as stopped:
        tool.parse_args(['--block-elements', '0', '--out', 'lf_t.pte'])
    assert stopped.value.code == 2
    assert '--block-elements must be at least 1' in capsys.readouterr().err
