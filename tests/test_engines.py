"""The plain training loop learns, checkpoints and resumes exactly."""

import numpy as np
import pytest
import torch

from monai_npc.data.phantoms import cardiac_pair
from monai_npc.engines import evaluate_pairs, train_pairs
from monai_npc.losses import RegistrationLoss, WarpedLabelDiceLoss
from monai_npc.networks.nets import NPCNet

TINY = dict(kernel_size=8, stride=4, num_pairs=8, top_k=4, gate_dim=16, hidden_dim=16, num_pe=16, num_steps=2, detach_steps=True)


def small_pairs(n, size=48):
    pairs = []
    for i in range(n):
        p = cardiac_pair(128, seed=i)
        sl = slice(40, 40 + size)
        pairs.append({k: (v[..., sl, sl] if k != "ddf" else v[:, sl, sl]) for k, v in p.items()})
    return pairs


def test_training_reduces_the_loss_and_resumes_from_checkpoint(tmp_path):
    pairs = small_pairs(4)
    torch.manual_seed(0)
    net = NPCNet(**TINY)
    hist = train_pairs(net, pairs, RegistrationLoss("acdc"), 20, batch_size=4, lr=3e-3, progress=False)
    first, last = np.mean([h["loss"] for h in hist[:5]]), np.mean([h["loss"] for h in hist[-5:]])
    assert last < first - 0.01, (first, last)
    # 6 iterations in one go == 3 + resume to 6
    torch.manual_seed(1)
    a = NPCNet(**TINY)
    b = NPCNet(**TINY)
    b.load_state_dict(a.state_dict())
    train_pairs(a, pairs, RegistrationLoss("acdc"), 6, batch_size=2, progress=False, lr_decay=0.9)
    ck = tmp_path / "ck.pt"
    train_pairs(b, pairs, RegistrationLoss("acdc"), 3, batch_size=2, progress=False, lr_decay=0.9, checkpoint=ck, checkpoint_every=100)
    c = NPCNet(**TINY)
    hist_c = train_pairs(c, pairs, RegistrationLoss("acdc"), 6, batch_size=2, progress=False, lr_decay=0.9, checkpoint=ck)
    assert len(hist_c) == 6
    for (n1, p1), (n2, p2) in zip(a.state_dict().items(), c.state_dict().items()):
        assert torch.allclose(p1, p2, atol=1e-5), n1


def test_evaluate_pairs_reports_dice_and_endpoint_error():
    pairs = small_pairs(2)
    net = NPCNet(**TINY)
    res = evaluate_pairs(net, pairs, names=("rv", "myo", "lv"))
    assert res["n_pairs"] == 2 and len(res["per_pair"]["dice_mean"]) == 2
    # an untrained net barely moves: Dice and EPE stay at their initial values
    assert abs(res["mean"]["dice_mean"] - res["mean"]["dice_mean_initial"]) < 0.02
    assert res["mean"]["epe_initial"] > 0.5


def test_checkpoint_write_is_crash_safe_and_bad_file_is_named(tmp_path, monkeypatch):
    pairs = small_pairs(2)
    ck = tmp_path / "ck.pt"
    net = NPCNet(**TINY)
    train_pairs(net, pairs, RegistrationLoss("acdc"), 2, batch_size=2, progress=False, checkpoint=ck)
    before = ck.read_bytes()
    real_save = torch.save

    def torn(obj, f, *args, **kwargs):  # a kill half-way through the write
        f.write(b"torn")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", torn)
    with pytest.raises(KeyboardInterrupt):
        train_pairs(net, pairs, RegistrationLoss("acdc"), 4, batch_size=2, progress=False, checkpoint=ck)
    monkeypatch.setattr(torch, "save", real_save)
    assert ck.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["ck.pt"]
    assert torch.load(ck, weights_only=True)["iteration"] == 2
    ck.write_bytes(b"")
    with pytest.raises(ValueError, match=r"cannot resume from checkpoint .*ck\.pt \(0 bytes\)"):
        train_pairs(net, pairs, RegistrationLoss("acdc"), 4, batch_size=2, progress=False, checkpoint=ck)


def test_training_with_label_loss_lowers_the_label_dice_loss():
    """Weak supervision in the plain loop: the label term is logged, beats the same run without it, and needs labels."""
    from monai_npc.engines import stack_pairs

    pairs = small_pairs(4)
    torch.manual_seed(0)
    unsup = NPCNet(**TINY)
    sup = NPCNet(**TINY)
    sup.load_state_dict(unsup.state_dict())
    dice = WarpedLabelDiceLoss((1, 2, 3))
    train_pairs(unsup, pairs, RegistrationLoss("acdc"), 20, batch_size=4, lr=3e-3, progress=False)
    hist = train_pairs(sup, pairs, RegistrationLoss("acdc"), 20, batch_size=4, lr=3e-3, progress=False, label_loss=dice, label_weight=5.0)
    assert all("label" in h for h in hist)
    image = torch.cat([stack_pairs(pairs, "moving"), stack_pairs(pairs, "fixed")], 1)
    labels = stack_pairs(pairs, "moving_label"), stack_pairs(pairs, "fixed_label")
    with torch.no_grad():
        after = {name: float(dice(*labels, net.eval()(image))) for name, net in (("unsupervised", unsup), ("label", sup))}
    assert after["label"] < after["unsupervised"] - 0.01, after
    unlabelled = [{k: v for k, v in p.items() if "label" not in k} for p in pairs]
    with pytest.raises(KeyError, match="moving_label"):
        train_pairs(sup, unlabelled, RegistrationLoss("acdc"), 1, progress=False, label_loss=dice)
