"""Numbers for the pure NPC functions: responses, interaction, residual theory, top-K, PE, warp, phase correlation."""

import math

import numpy as np
import pytest
import torch
from monai.networks.blocks import Warp as MonaiWarp

from monai_npc.functional import (
    DIHEDRAL_INVERSE,
    dihedral,
    dihedral_field,
    fourier_filter_pairs,
    interaction_features,
    jacobian_determinant,
    pair_interaction,
    pair_residual,
    pair_responses,
    phase_correlation,
    polar_features,
    positional_encoding,
    soft_topk_mask,
    unit_normalize_filters,
    warp_image,
)
from monai_npc.functional.filter_pairs import _half_space_frequencies


def smooth_image(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand((1, 1) + tuple(shape), generator=g)
    return torch.nn.functional.avg_pool2d(x, 5, 1, 2)


def fourier_shift(img, shift):
    """``img(x - shift)`` by the Fourier shift theorem (exact for band-limited circular images)."""
    ky = torch.fft.fftfreq(img.shape[-2]).view(-1, 1)
    kx = torch.fft.fftfreq(img.shape[-1]).view(1, -1)
    phase = torch.exp(-2j * math.pi * (ky * shift[0] + kx * shift[1]))
    return torch.fft.ifft2(torch.fft.fft2(img.double()) * phase).real.float()


# ---------------------------------------------------------------- filter pairs
def test_responses_shape_and_intensity_invariance():
    img = torch.rand(2, 1, 64, 48)
    filters = unit_normalize_filters(torch.randn(8, 2, 16, 16))
    a = pair_responses(img, filters, 4)
    assert a.shape == (2, 2, 8, 16, 12)
    b = pair_responses(3.0 * img + 7.0, filters, 4)
    assert torch.allclose(a, b, atol=1e-3)
    assert a.abs().max() <= 16.0 + 1e-4  # |psi^T x_std| <= ||x_std|| = sqrt(256)


def test_unit_normalized_filters():
    w = unit_normalize_filters(torch.randn(5, 2, 7, 7) * 10)
    assert torch.allclose(w.flatten(2).norm(dim=-1), torch.ones(5, 2), atol=1e-6)


def test_fourier_pairs_are_orthonormal_cos_sin():
    w = fourier_filter_pairs(126, 16, 2)
    flat = w.flatten(1, 2).reshape(252, -1).double()
    gram = flat @ flat.T
    assert torch.allclose(gram, torch.eye(252, dtype=torch.float64), atol=1e-5)
    assert len(_half_space_frequencies(16, 2)) == (16 * 16 - 4) // 2


def test_flat_patches_give_zero_finite_responses_and_gradients():
    img = torch.full((1, 1, 32, 32), 0.4, requires_grad=True)
    filters = unit_normalize_filters(torch.randn(4, 2, 8, 8)).requires_grad_(True)
    a = pair_responses(img, filters, 4)
    assert a.detach().abs().max() < 1e-3  # vs O(1) responses of textured patches
    feats = polar_features(pair_interaction(a, a, 1), 1)
    _, r = pair_residual(a, a, 1)
    feats2, r2 = interaction_features(a, a, 1)
    (feats.sum() + r.sum() + feats2.sum() + r2.sum()).backward()
    assert torch.isfinite(img.grad).all() and torch.isfinite(filters.grad).all()


# ---------------------------------------------------------------- interaction
def test_interaction_of_rotated_pair():
    a = torch.randn(3, 5, 2)
    t = torch.rand(3, 5) * 6.0 - 3.0
    b = torch.stack([a[..., 0] * t.cos() - a[..., 1] * t.sin(), a[..., 0] * t.sin() + a[..., 1] * t.cos()], -1)
    z = pair_interaction(a, b, pair_dim=-1)
    sq = (a * a).sum(-1)
    assert torch.allclose(z, torch.stack([sq * t.cos(), -sq * t.sin()], -1), atol=1e-5)
    f = polar_features(z, pair_dim=-1, eps=0.0)
    assert torch.allclose(torch.atan2(f[..., 1], f[..., 0]), torch.atan2(-t.sin(), t.cos()), atol=1e-5)
    r2, r2n = pair_residual(a, b, pair_dim=-1, eps=0.0)
    assert r2.abs().max() < 1e-9 and r2n.abs().max() < 1e-6


def test_interaction_functions_gradcheck():
    a = torch.randn(2, 3, 2, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 3, 2, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, y: polar_features(pair_interaction(x, y)), (a, b))
    assert torch.autograd.gradcheck(lambda x, y: pair_residual(x, y)[1], (a, b))


def test_fused_interaction_features_match_the_separate_functions():
    a, b = torch.randn(2, 2, 5, 3, 3, dtype=torch.float64), torch.randn(2, 2, 5, 3, 3, dtype=torch.float64)
    feats, r2n = interaction_features(a, b, 1, eps=1e-12)
    assert torch.allclose(feats, polar_features(pair_interaction(a, b, 1), 1, eps=0.0), atol=1e-8)
    assert torch.allclose(r2n, pair_residual(a, b, 1, eps=1e-12)[1], atol=1e-8)


def test_strided_and_unshuffled_convolutions_agree():
    img = torch.rand(2, 1, 40, 36)
    filters = unit_normalize_filters(torch.randn(6, 2, 8, 8))
    fast = pair_responses(img, filters, 4)
    from monai_npc.functional import filter_pairs as fp

    padded = torch.nn.functional.pad(img, fp.same_padding(8, 4, 2), mode="reflect")
    weight = filters.transpose(0, 1).reshape(12, 1, 8, 8)
    direct = torch.nn.functional.conv2d(padded, weight, stride=4)
    assert torch.allclose(fp._strided_conv(padded, weight, 4, 2), direct, atol=1e-5)
    assert fast.shape == (2, 2, 6, 10, 9)


def test_residual_definition():
    a = torch.tensor([[3.0, 4.0]])
    b = torch.tensor([[1.0, 0.0]])
    r2, r2n = pair_residual(a, b, pair_dim=-1, eps=0.0)
    assert r2.item() == pytest.approx(16.0) and r2n.item() == pytest.approx(16.0 / 5.0)


# ---------------------------------------------------------------- residual theory (paper Appendix B)
def random_orthogonal(n, gen):
    q, r = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))


def rot(t):
    return torch.tensor([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]], dtype=torch.float64)


@pytest.mark.parametrize("seed", range(5))
def test_lemma_invariant_span_gives_zero_residual_for_every_x(seed):
    """span(psi) invariant under orthogonal L  =>  r^2(x) = 0 for every x (Lemma, necessity)."""
    gen = torch.Generator().manual_seed(seed)
    n = 16
    u = random_orthogonal(n, gen)
    blocks = torch.block_diag(*[rot(float(t)) for t in torch.rand(n // 2, generator=gen) * 6.28])
    L = u @ blocks @ u.T
    psi = u[:, 2:4]  # an invariant 2-D eigen-subspace of L
    phi = psi @ rot(0.7)  # same span, different in-plane orientation
    x = torch.randn(n, 200, generator=gen, dtype=torch.float64)
    y = L @ x
    r2, _ = pair_residual((psi.T @ x).T, (phi.T @ y).T, pair_dim=-1, eps=0.0)
    assert r2.max() < 1e-20
    # swap symmetry of the ideal case
    r2s, _ = pair_residual((phi.T @ x).T, (psi.T @ y).T, pair_dim=-1, eps=0.0)
    assert r2s.max() < 1e-20


@pytest.mark.parametrize("seed", range(5))
def test_theorem_non_invariant_span_gives_positive_residual_almost_surely(seed):
    """[P, L] != 0 and x from a continuous distribution  =>  r^2(x) > 0 (Theorem, almost-sure sufficiency)."""
    gen = torch.Generator().manual_seed(100 + seed)
    n = 16
    L = random_orthogonal(n, gen)
    psi = torch.linalg.qr(torch.randn(n, 2, generator=gen, dtype=torch.float64))[0]
    P = psi @ psi.T
    assert (P @ L - L @ P).abs().max() > 1e-3
    x = torch.randn(n, 2000, generator=gen, dtype=torch.float64)
    r2, _ = pair_residual((psi.T @ x).T, (psi.T @ (L @ x)).T, pair_dim=-1, eps=0.0)
    assert r2.min() > 0
    # the vanishing set is the quadric x^T A x = 0 with A = L^T P L - P of rank <= 4
    A = L.T @ P @ L - P
    assert torch.linalg.matrix_rank(A) <= 4
    q = ((x * (A @ x)).sum(0))
    assert torch.allclose(q.abs(), ((psi.T @ (L @ x)).norm(dim=0) ** 2 - (psi.T @ x).norm(dim=0) ** 2).abs())


# ---------------------------------------------------------------- reduction to phase correlation
def test_fourier_pairs_reduce_to_cross_power_spectrum_and_recover_shift():
    n = 32
    x = smooth_image((n, n), seed=1)
    shift = (5, -3)
    y = torch.roll(x, shifts=shift, dims=(2, 3))  # y(p) = x(p - shift), circular
    freqs = _half_space_frequencies(n, 2)
    filters = fourier_filter_pairs(len(freqs), n, 2)
    # one patch covering the whole image: stride = kernel = n
    a = pair_responses(x, filters, n, padding_mode="zeros")[0, :, :, 0, 0].T  # (pairs, 2)
    b = pair_responses(y, filters, n, padding_mode="zeros")[0, :, :, 0, 0].T
    z = pair_interaction(a, b, pair_dim=-1)
    theta = torch.atan2(z[:, 1], z[:, 0])
    X, Y = torch.fft.fft2(x[0, 0].double()), torch.fft.fft2(y[0, 0].double())
    idx = [(f[0] % n, f[1] % n) for f in freqs]
    cps = torch.stack([torch.conj(X[i]) * Y[i] for i in idx])
    diff = torch.remainder(theta.double() - torch.angle(cps) + math.pi, 2 * math.pi) - math.pi
    assert diff.abs().max() < 1e-3
    # the per-pair angles alone recover the shift: rebuild the unit cross-power spectrum and invert
    spec = torch.zeros(n, n, dtype=torch.complex128)
    for (i, j), t in zip(idx, theta.double()):
        spec[i, j] = torch.polar(torch.tensor(1.0, dtype=torch.float64), t)
        spec[(-i) % n, (-j) % n] = torch.polar(torch.tensor(1.0, dtype=torch.float64), -t)
    peak = torch.fft.ifft2(spec).real.argmax()
    found = (int(peak // n), int(peak % n))
    assert found == (shift[0] % n, shift[1] % n)


@pytest.mark.parametrize("shift", [(3.0, -5.0), (2.3, 4.6), (-7.25, 0.5)])
def test_phase_correlation_recovers_global_shift(shift):
    moving = smooth_image((64, 64), seed=2)
    fixed = fourier_shift(moving, (-shift[0], -shift[1]))  # fixed(x) = moving(x + shift)
    est = phase_correlation(moving, fixed, upsample_factor=100)[0]
    assert torch.allclose(est, torch.tensor(shift), atol=0.05)


def test_windowed_phase_correlation_ignores_a_static_border():
    """A static bright frame pulls the plain estimate towards zero; the Tukey-windowed one finds the shift."""
    moving = smooth_image((64, 64), seed=3)
    fixed = fourier_shift(moving, (-3.0, 2.0))  # fixed(x) = moving(x + (3, -2))
    frame = torch.zeros(1, 1, 64, 64)
    frame[..., :4, :] = frame[..., -4:, :] = frame[..., :, :4] = frame[..., :, -4:] = 5.0
    est = phase_correlation(moving + frame, fixed + frame, upsample_factor=20, window=0.5)[0]
    assert torch.allclose(est, torch.tensor([3.0, -2.0]), atol=0.3), est


def test_phase_correlation_max_shift_bounds_the_peak_search():
    """Two copies of the content: a strong one moved by (40, 30), a weaker one by (2, -1). Unbounded, the
    strong far peak wins; ``max_shift=8`` keeps only lags within +-8 px per axis, where the weak one is."""
    moving = smooth_image((128, 128), seed=4)
    fixed = fourier_shift(moving, (-40.0, -30.0)) + 0.5 * fourier_shift(moving, (-2.0, 1.0))
    np.testing.assert_allclose(phase_correlation(moving, fixed, 20)[0].numpy(), [40.0, 30.0], atol=0.1)
    for bound in (8, 2.5):
        np.testing.assert_allclose(phase_correlation(moving, fixed, 20, max_shift=bound)[0].numpy(), [2.0, -1.0], atol=0.1)
    assert float(phase_correlation(moving, fixed, 20, max_shift=0)[0].abs().max()) < 1.0  # only lag 0 (+ sub-pixel step)
    with pytest.raises(ValueError, match="max_shift"):
        phase_correlation(moving, fixed, max_shift=-1)


def test_dihedral_field_round_trip_and_inverse_codes():
    x, d = torch.randn(2, 1, 6, 6), torch.randn(2, 2, 6, 6)
    codes = {tuple(dihedral(x, k).flatten().tolist()) for k in range(8)}
    assert len(codes) == 8  # eight different symmetries
    for k in range(8):
        assert torch.equal(dihedral(dihedral(x, k), DIHEDRAL_INVERSE[k]), x)
        assert torch.equal(dihedral_field(dihedral_field(d, k), DIHEDRAL_INVERSE[k]), d)
    # a constant shift (dy, dx) = (1, 2) becomes (2, 1) under the transpose and (-1, -2) under both flips
    s = torch.tensor([1.0, 2.0]).view(1, 2, 1, 1).expand(1, 2, 6, 6)
    assert dihedral_field(s, 4)[0, :, 0, 0].tolist() == [2.0, 1.0]
    assert dihedral_field(s, 3)[0, :, 0, 0].tolist() == [-1.0, -2.0]


def test_phase_correlation_matches_skimage():
    skreg = pytest.importorskip("skimage.registration")
    gen = np.random.default_rng(0)
    for k in range(5):
        moving = smooth_image((64, 64), seed=10 + k)
        s = gen.uniform(-8, 8, 2)
        fixed = fourier_shift(moving, (float(s[0]), float(s[1])))
        ours = phase_correlation(moving, fixed, upsample_factor=100)[0].numpy()
        ref = skreg.phase_cross_correlation(fixed[0, 0].numpy(), moving[0, 0].numpy(), upsample_factor=100)[0]
        assert np.allclose(ours, -ref, atol=0.05)  # skimage returns the shift to apply to moving


# ---------------------------------------------------------------- top-K
def test_soft_topk_sums_to_k_and_matches_hard_selection():
    s = torch.rand(4, 32, 5, 5) * 3
    m = soft_topk_mask(s, 8, dim=1, temperature=1e-3)
    assert torch.allclose(m.sum(1), torch.full((4, 5, 5), 8.0), atol=1e-3)
    hard = torch.zeros_like(s).scatter_(1, s.topk(8, dim=1, largest=False).indices, 1.0)
    assert (m.round() == hard).float().mean() > 0.999
    soft = soft_topk_mask(s, 8, dim=1, temperature=0.5)
    assert torch.allclose(soft.sum(1), torch.full((4, 5, 5), 8.0), atol=1e-3)
    assert ((soft > 0.01) & (soft < 0.99)).any()  # genuinely soft at a large temperature


def test_soft_topk_gradient_is_the_implicit_gradient():
    """Compare with finite differences of the exactly solved threshold problem."""
    s = (torch.rand(1, 10, dtype=torch.float64) * 2).requires_grad_(True)
    k, tau = 4, 0.3
    m = soft_topk_mask(s, k, dim=1, temperature=tau, iterations=30)
    w = torch.randn(1, 10, dtype=torch.float64)
    (m * w).sum().backward()

    def solve(sc):
        return soft_topk_mask(sc, k, dim=1, temperature=tau, iterations=40)

    num = torch.zeros(10, dtype=torch.float64)
    h = 1e-6
    for i in range(10):
        d = torch.zeros(1, 10, dtype=torch.float64)
        d[0, i] = h
        with torch.no_grad():
            num[i] = ((solve(s + d) - solve(s - d)) * w).sum() / (2 * h)
    assert torch.allclose(s.grad[0], num, atol=1e-6)


def test_hard_topk_forward_with_soft_gradient():
    s = torch.rand(2, 16, 3).requires_grad_(True)
    m = soft_topk_mask(s, 5, dim=1, temperature=0.2, hard=True)
    assert set(m.detach().unique().tolist()) <= {0.0, 1.0}
    assert torch.all(m.detach().sum(1) == 5)
    (m * torch.randn_like(m)).sum().backward()
    assert s.grad.abs().sum() > 0


def test_topk_warm_start_from_a_wrong_threshold_still_converges():
    from monai_npc.functional import soft_topk_mask_with_threshold

    s = torch.rand(3, 64, 4, 4) * 5
    ref, t = soft_topk_mask_with_threshold(s, 20, 1, 0.1)
    for init in (t + 0.3, t - 0.3, torch.full_like(t, 100.0)):
        m, _ = soft_topk_mask_with_threshold(s, 20, 1, 0.1, init=init, iterations=6)
        assert torch.allclose(m.sum(1), torch.full((3, 4, 4), 20.0), atol=1e-3)
        assert torch.allclose(m, ref, atol=1e-3)


def test_topk_edge_cases():
    s = torch.rand(2, 8)
    assert torch.equal(soft_topk_mask(s, 8), torch.ones_like(s))
    with pytest.raises(ValueError, match="k must be"):
        soft_topk_mask(s, 0)


# ---------------------------------------------------------------- positional encoding
def test_positional_encoding():
    g = positional_encoding([32, 24], 256)
    assert g.shape == (256, 32, 24)
    assert torch.allclose(g[0::2] ** 2 + g[1::2] ** 2, torch.ones(128, 32, 24), atol=1e-6)
    # axis 0 channels vary along axis 0 only
    assert torch.allclose(g[:128, :, 0], g[:128, :, 5])
    with pytest.raises(ValueError, match="multiple"):
        positional_encoding([8, 8], 30)


# ---------------------------------------------------------------- warp and Jacobian
def test_warp_matches_monai_and_integer_shift():
    img = torch.rand(2, 3, 20, 24)
    ddf = torch.randn(2, 2, 20, 24) * 3
    assert torch.allclose(warp_image(img, ddf), MonaiWarp("bilinear", "border")(img, ddf), atol=1e-5)
    shift = torch.zeros(1, 2, 20, 24)
    shift[:, 0] = 2.0  # out(i, j) = img(i + 2, j)
    out = warp_image(img[:1], shift)
    assert torch.allclose(out[..., :-2, :], img[:1, :, 2:, :], atol=1e-6)
    labels = torch.randint(0, 4, (1, 1, 20, 24)).float()
    warped = warp_image(labels, ddf[:1], mode="nearest")
    assert set(warped.unique().tolist()) <= {0.0, 1.0, 2.0, 3.0}
    vol = torch.rand(1, 1, 6, 7, 8)
    ddf3 = torch.randn(1, 3, 6, 7, 8)
    assert torch.allclose(warp_image(vol, ddf3), MonaiWarp("bilinear", "border")(vol, ddf3), atol=1e-5)


def test_jacobian_of_affine_fields():
    grid = torch.stack(torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij"))
    A = torch.tensor([[0.2, -0.1], [0.3, -0.4]])
    ddf = torch.einsum("ij,jxy->ixy", A, grid).unsqueeze(0)
    det = jacobian_determinant(ddf)
    assert torch.allclose(det, torch.full((1, 16, 16), float(torch.det(torch.eye(2) + A))), atol=1e-5)
    grid3 = torch.stack(torch.meshgrid(*[torch.arange(6.0)] * 3, indexing="ij"))
    A3 = torch.randn(3, 3) * 0.2
    det3 = jacobian_determinant(torch.einsum("ij,jxyz->ixyz", A3, grid3).unsqueeze(0))
    assert torch.allclose(det3, torch.full((1, 6, 6, 6), float(torch.det(torch.eye(3) + A3))), atol=1e-4)
    with pytest.raises(ValueError, match="channels"):
        jacobian_determinant(torch.zeros(1, 3, 8, 8))


def test_dice_by_value():
    import numpy as np

    from monai_npc.functional import dice_by_value

    a = np.array([[0, 1, 1, 2], [2, 2, 0, 0]])
    b = np.array([[0, 1, 0, 2], [2, 0, 0, 0]])
    # value 1: |a|=2, |b|=1, common 1 -> 2/3; value 2: |a|=3, |b|=2, common 2 -> 4/5; value 3 absent from both
    assert dice_by_value(a, b, [1, 2, 3]) == {1: 2 / 3, 2: 0.8, 3: None}
