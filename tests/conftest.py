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
