"""benchmarks.solver_study on a tiny grid: residual traces, table and plot."""
import os.path as osp

from benchmarks import solver_study as tool


def test_tiny_grid(tmp_path, capsys):
    tool.main([
        '--conds', '10', '100', '--size', '12', '--dim', '8', '--batch',
        '3', '--iters', '25', '--ns-iters', '20', '--repeat', '1',
        '--out-dir', str(tmp_path)
    ])
    out = capsys.readouterr().out
    assert 'CG on AX = I' in out and 'linalg.solve' in out
    assert osp.getsize(tmp_path / 'solver_residuals.png') > 1000
    assert (tmp_path / 'solver_study.md').read_text().count('\n|') > 8


def test_solvers_converge_on_spd_laplacian_matrices():
    import torch
    points = torch.randn(4, 16, 8, dtype=torch.float64,
                         generator=torch.Generator().manual_seed(0))
    lam = tool.lambda_for_cond(points, 100., eps=1e-3)
    mats = tool.laplacian_matrices(points, lam, 1e-3)
    assert abs(tool.median_cond(mats) / 100 - 1) < 1e-3
    for init in tool.NS_INITS:
        assert tool.newton_schulz(mats, init, 60)[-1].max() < 1e-8, init
    assert tool.conjugate_gradient(mats, 40)[-1].max() < 1e-8
