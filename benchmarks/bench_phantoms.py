"""Phantom generation speed: milliseconds per cardiac and echo pair (median over seeds).

    python benchmarks/bench_phantoms.py [--size 128] [--repeats 10]
"""

import argparse
import statistics
import time

from monai_npc.data.phantoms import cardiac_pair, echo_pair


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=128, help="image side in pixels (default 128)")
    p.add_argument("--repeats", type=int, default=10, help="pairs (seeds) timed per kind; the median is printed (default 10)")
    args = p.parse_args()
    for make in (cardiac_pair, echo_pair):
        make(args.size, 0)  # warm up
        times = []
        for seed in range(args.repeats):
            t0 = time.perf_counter()
            make(args.size, seed)
            times.append(time.perf_counter() - t0)
        print(f"{make.__name__:13s} {1000 * statistics.median(times):6.1f} ms per {args.size}x{args.size} pair")


if __name__ == "__main__":
    main()
