import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))

#: ``../shared`` beside the repository root (absent in a user's fresh clone)
SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def one_thread():
    """One intra-op torch thread for the test (restored after): on a loaded 2-core machine two
    threads are several times slower. Modules use it with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _restore_logging():
    """CLI calls in-process configure logging for a terminal (``monai_npc.runtime.configure_logging``):
    undo it after each test so that later tests' ``caplog`` sees ``monai_npc`` records again."""
    import logging
    import warnings

    formatwarning = warnings.formatwarning
    yield
    warnings.formatwarning = formatwarning
    logging.captureWarnings(False)
    for name in ("monai_npc", "py.warnings"):
        logger = logging.getLogger(name)
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
        for handler in [h for h in logger.handlers if getattr(h, "_monai_npc", False)]:
            logger.removeHandler(handler)


@pytest.fixture
def prior_always_acts(monkeypatch):
    """The label prior's last check (it stands aside where the network's field already carries the label onto its
    segmentation of the fixed image) switched off, for tests of what the prior does when it acts: on the phantoms
    the transform is as good as the prior can judge, so with the defaults it stands aside there."""
    import math

    import monai_npc.apps.registration.label_prior as label_prior

    monkeypatch.setattr(label_prior, "PRIOR_MIN_GAP", -math.inf)
