"""``python -m mmlaplacian.info`` prints a usable bug-report header."""
from mmlaplacian import info


def test_info_lists_versions_and_extension_state(capsys):
    info.main()  # what ``python -m mmlaplacian.info`` runs
    out = capsys.readouterr().out
    for key in ('Python', 'torch', 'mmengine', 'mmcv', 'mmdet', 'mmpretrain',
                'pycocotools', 'OpenMMLab stack', 'mmcv._ext loads', 'mmlaplacian._ext loads',
                'mmlaplacian._ext devices', 'GCC', 'NVCC'):
        assert f'\n{key} ' in '\n' + out, key
    line = next(l for l in out.splitlines()
                if l.startswith('mmlaplacian._ext loads'))
    assert line.split(':', 1)[1].strip() == 'yes', out
    devices = next(l for l in out.splitlines()
                   if l.startswith('mmlaplacian._ext devices'))
    assert 'cpu' in devices
