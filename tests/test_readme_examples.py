"""The README's "Three ways in" examples run as they are written."""
import os.path as osp
import re

import pytest

README = osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))),
                  'README.md')
# What each example needs beyond the OpenMMLab test environment.
NEEDS = {1: 'timm', 2: 'onnxruntime'}


def readme_examples():
    text = open(README, encoding='utf-8').read()
    section = text.split('## Three ways in', 1)[1].split('\n## ', 1)[0]
    return re.findall(r'```python\n(.*?)```', section, flags=re.S)


def test_the_section_has_the_three_examples():
    assert len(readme_examples()) == 3


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    'index',
    # The ONNX export of the Tiny backbone takes 15 s: slow, so its file is
    # scheduled early (tests/conftest.py).
    [0, 1, pytest.param(2, marks=pytest.mark.slow)],
    ids=['openmmlab', 'timm', 'deployment'])
def test_example_runs(index, repo_root, tmp_path, monkeypatch):
    if index in NEEDS:
        pytest.importorskip(NEEDS[index])
    code = readme_examples()[index]
    # Config paths are relative to the repository; files go to tmp_path.
    code = code.replace("'configs/", f"'{repo_root}/configs/")
    monkeypatch.chdir(tmp_path)
    names = {}
    exec(compile(code, f'README example {index}', 'exec'), names)
    if index == 2:
        check_exported_tiny_matches_eager(names)


def check_exported_tiny_matches_eager(names: dict) -> None:
    """The deployment example's file holds the fixed-size Tiny backbone:
    onnxruntime gives eager PyTorch's feature maps (the detector tests
    export a narrower backbone)."""
    import torch

    from benchmarks.onnx_compare import compare_features
    from mmlaplacian import LaplacianFormer
    from mmlaplacian.deployment import ort_run, ort_session
    model, image = names['model'], names['image']
    tiny = LaplacianFormer.arch_zoo['tiny']
    assert model.backbone.embed_dims == tiny['embed_dims']
    with torch.no_grad():
        expected = model(image)
    comparison = compare_features(
        ort_run(ort_session('lf_tiny.onnx'), image), expected)
    assert comparison.ok, comparison.lines(model.output_names)
