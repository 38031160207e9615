"""The tracking schemes as objects (monai_npc.apps.tracking.schemes): the registry, the lookup, what each declares."""

from __future__ import annotations

import subprocess
import sys

import pytest

from monai_npc.apps.tracking.schemes import (DEFAULT_SCHEME, SCHEMES, Anchored, Average, Bidirectional, Direct, Sequential,
                                             TrackingScheme, frame_order, registration_count, scheme)


def test_registry_is_the_tuple_of_names_and_gives_the_classes():
    assert SCHEMES == ("direct", "sequential", "average", "bidirectional", "anchored") and isinstance(SCHEMES, tuple)
    assert repr(SCHEMES) == repr(tuple(SCHEMES)) and SCHEMES[0] == "direct" and "anchored" in SCHEMES
    assert [SCHEMES[n] for n in SCHEMES] == [Direct, Sequential, Average, Bidirectional, Anchored]
    assert DEFAULT_SCHEME in SCHEMES and all(issubclass(SCHEMES[n], TrackingScheme) and SCHEMES[n].name == n for n in SCHEMES)
    import pickle

    assert pickle.loads(pickle.dumps(SCHEMES))["average"] is Average


def test_scheme_lookup():
    assert isinstance(scheme("bidirectional"), Bidirectional)
    with pytest.raises(ValueError, match=r"scheme 'forward' \(scheme / --scheme\) is not one of \('direct'"):
        scheme("forward")
    with pytest.raises(ValueError, match="is not one of"):
        scheme(None)  # type: ignore[arg-type]


def test_networks_labels_and_registrations():
    """Which networks, who gets a label and how many registrations (shared groups counted once) each scheme declares."""
    assert {n: SCHEMES[n].networks for n in SCHEMES} == {
        "direct": (False,), "sequential": (True,), "average": (True, False), "bidirectional": (True,), "anchored": ()}
    for name in ("direct", "sequential", "average", "bidirectional"):
        s = scheme(name)
        assert s.labels(None) == (True, False) and s.labels(0.0) == (False, False) and s.labels(0.05) == (True, True)
    assert Anchored().labels(None) == (False, False) and Anchored().labels(0.0) == (False, False) and Anchored().labels(0.1) == (True, True)
    counts = {n: registration_count([scheme(n)], 6) for n in SCHEMES}
    assert counts == {"direct": 5, "sequential": 6, "average": 11, "bidirectional": 12, "anchored": 6}
    assert registration_count([scheme(n) for n in SCHEMES], 6) == 5 + 6 + 6 + 6  # direct, forward, backward, anchored chains
    assert frame_order(["r", "r+1", "r+2", "r+3"], 2) == ["r+2", "r+3", "r", "r+1"]


def test_schemes_module_is_light():
    """The command line's --help reads SCHEMES: importing the module loads neither torch nor numpy."""
    code = "import sys, monai_npc.apps.tracking.schemes as s; print(sorted({'torch', 'numpy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
