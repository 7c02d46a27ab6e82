"""Reduced reproduction of 004 Figures 3–8 (docs/math.md §7.4 claims on Clip-User)."""

from __future__ import annotations

import itertools

import pytest

from research.clip_user_figures import main, markdown_table, run, simulate

EPS = (0.1, 0.3, 0.6, 1.0)
GAMMAS = (3, 6, 9)


@pytest.fixture(scope="module")
def rows():
    # 3 draws instead of 10, 4 values of eps instead of 10; same generator as 004.
    return simulate(draws=3, eps_grid=EPS, gammas=GAMMAS, seed=0, progress=False)


def _by_gamma(rows):
    out = {}
    for r in rows:
        out.setdefault(r.gamma, []).append(r)
    return out


def test_k_eps_well_below_g1_eps(rows):
    # 004 Figs 3-5: P̂ε = mean Kε sits well below G₁ε = 12ε, at every eps and γ.
    assert len(rows) == len(EPS) * len(GAMMAS)
    for r in rows:
        assert r.G1 == 12
        assert 1 <= r.min_k <= r.mean_k <= r.max_k <= r.G1
        assert r.mean_k_eps <= 0.5 * r.g1_eps, r


def test_k_falls_as_gamma_grows(rows):
    # 004 §VI-B: "increasing γ improves the privacy loss degradation". Averaged over
    # eps, mean K strictly decreases from γ = 3 to 6 to 9; per eps it never rises.
    by = _by_gamma(rows)
    avg = [sum(r.mean_k for r in by[float(g)]) / len(EPS) for g in GAMMAS]
    assert avg[0] > avg[1] > avg[2]
    for lo, hi in itertools.pairwise(GAMMAS):
        for a, b in zip(by[float(lo)], by[float(hi)], strict=True):
            assert b.mean_k <= a.mean_k + 1e-12


def test_error_gap_grows_with_gamma(rows):
    # 004 Figs 6-8: Ē <= E, and the gap between E and Ē widens as γ grows (at the
    # smallest eps, where noise dominates and the pseudo-user step helps most).
    for r in rows:
        assert r.mean_e_bar <= r.mean_e * (1 + 1e-12)
    by = _by_gamma(rows)
    ratio = [by[float(g)][0].mean_e_bar / by[float(g)][0].mean_e for g in GAMMAS]
    assert ratio[0] > ratio[1] > ratio[2]
    # E before Clip-User is pure noise (nothing clipped): it scales as 1/eps.
    for g in GAMMAS:
        first, last = by[float(g)][0], by[float(g)][-1]
        assert first.mean_e * first.eps == pytest.approx(last.mean_e * last.eps)


def test_run_writes_plots_and_table(tmp_path):
    paths = run(tmp_path / "out", draws=1, eps_grid=(0.2, 1.0), gammas=(3, 9), progress=False)
    names = sorted(p.name for p in paths)
    assert names == sorted(
        [
            "clip_user_privacy_gamma3.png",
            "clip_user_error_gamma3.png",
            "clip_user_privacy_gamma9.png",
            "clip_user_error_gamma9.png",
            "clip_user_figures.md",
        ]
    )
    for p in paths:
        assert p.exists() and p.stat().st_size > 0
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (tmp_path / "out" / "clip_user_figures.md").read_text(encoding="utf-8")
    assert text.count("\n| 3 |") == 2 and text.count("\n| 9 |") == 2


def test_cli(tmp_path, capsys):
    argv = ["--out", str(tmp_path), "--draws", "1", "--eps", "0.5", "--gammas", "6"]
    assert main([*argv, "--no-progress"]) == 0
    assert "clip_user_figures.md" in capsys.readouterr().out


def test_markdown_table_has_one_row_per_point(rows):
    table = markdown_table(rows)
    assert table.count("\n") == 2 + len(rows)
