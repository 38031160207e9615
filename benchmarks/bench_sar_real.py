"""Real-scene SAR benchmark (issue 14): ``python benchmarks/bench_sar_real.py [--model sar] [--out DIR]``.

The same as ``monai-npc sar bench-real``: on the held-out test pairs and on the training-pixel pairs
of ``../shared/data/sar_real`` (see ``monai_npc.extras.sar.real``), with global shifts up to +-6 and
+-8 px plus a smooth non-rigid field up to 3 px, the endpoint error inside a 24-px margin (all,
unchanged and changed pixels) of no registration, scikit-image phase correlation (upsample 20), the
package's windowed phase correlation and NPC; NPC's wins; seconds per pair (1 torch thread).
"""

import sys

from monai_npc.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["sar", "bench-real", *sys.argv[1:]]))
