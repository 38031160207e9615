"""Phantom generation speed: seconds per 128 x 128 cardiac and echo pair (median of 10).

    python benchmarks/bench_phantoms.py
"""

import statistics
import time

from monai_npc.data.phantoms import cardiac_pair, echo_pair


def main() -> None:
    for make in (cardiac_pair, echo_pair):
        make(128, 0)  # warm up
        times = []
        for seed in range(10):
            t0 = time.perf_counter()
            make(128, seed)
            times.append(time.perf_counter() - t0)
        print(f"{make.__name__:13s} {1000 * statistics.median(times):6.1f} ms per 128x128 pair")


if __name__ == "__main__":
    main()
