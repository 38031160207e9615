"""SAR co-registration with NPC against classical global phase correlation (paper Appendix "Sub-meter SAR").

- :mod:`.preprocess`: log-amplitude, speckle smoothing, robust rescaling (``meta["preprocessing"] == "sar"``);
- :mod:`.io`: single-band amplitude GeoTIFF / TIFF / PNG readers and writers (no GDAL);
- :mod:`.synthetic`: synthetic 256 x 256 pairs (scene, Gamma speckle with ``L`` looks, shift + smooth
  non-rigid deformation, optional changes) with the true displacement;
- :mod:`.real`: the real scenes (``sar_real``: ottawa, farmland, yellow_river, wenchuan, jeddah_s1) as pairs with
  a known warp, train / test split;
- :mod:`.model`: the coarse + fine NPC cascade (phase-correlation start); :mod:`.train`: training on synthetic
  or real pairs;
- :mod:`.evaluate`: NCC and endpoint error for no registration, phase correlation and NPC;
  :mod:`.bench_real`: the real-scene benchmark (``monai-npc sar bench-real``);
- :mod:`.figures`: the moving / fixed / before / ours / phase-correlation panel.
"""

from .evaluate import METHODS, endpoint_error, evaluate_sar, ncc, phase_correlation_shift, register_sar
from .io import read_amplitude, write_amplitude
from .model import SAR_CONFIG, sar_net
from .preprocess import PREPROCESSING, log_amplitude, preprocess_slices, sar_normalize
from .real import benchmark_pairs, make_real_pair, read_scenes, split_sources
from .synthetic import SARPairConfig, make_sar_pair, make_sar_pairs

__all__ = [
    "METHODS", "PREPROCESSING", "SAR_CONFIG", "SARPairConfig", "benchmark_pairs", "endpoint_error", "evaluate_sar",
    "log_amplitude", "make_real_pair", "make_sar_pair", "make_sar_pairs", "ncc", "phase_correlation_shift", "preprocess_slices",
    "read_amplitude", "read_scenes", "register_sar", "sar_net", "sar_normalize", "split_sources", "write_amplitude",
]
