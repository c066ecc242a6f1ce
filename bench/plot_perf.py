#!/usr/bin/python3
"""plot_perf: busbw and time against message size, one line per run or per library, as a PNG.

Inputs are what the benchmarks write: `*_perf --json FILE` files, or the nccl-tests style text
output of `*_perf` / `*_perf_mpi` (what the bench/compare_*.sh scripts keep in their raw-results
directory; a directory stands for every .json and .txt file in it). Files are grouped into lines by
label: `--label NAME=FILE` names one file; otherwise the label is the file name without its
extension, its round suffix (-r3) and its all-digit parts (a size), so ours-1048576-r2.txt and
ours-8-r1.txt are both "ours", and the rounds of one label at one size plot as their median.

Plotting is gnuplot's (Debian's gnuplot-nox); the data and the script it ran are kept beside the
PNG (FILE.dat, FILE.gp) so a plot can be redone or checked by hand.

usage: plot_perf.py -o OUT.png [--title T] [--in-place] [--label NAME=FILE]... FILE|DIR...
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

COLUMNS_OOP = (5, 6, 7)  # time (us), algbw, busbw: 0-based after size count type redop root
COLUMNS_IP = (9, 10, 11)


def parse_json(path, in_place):
    with open(path) as f:
        doc = json.load(f)
    key = "in_place" if in_place else "out_of_place"
    rows = []
    for r in doc.get("results", []):
        p = r.get(key) or {}
        if p.get("time_us") is None:
            continue
        rows.append((int(r["size"]), float(p["time_us"]), float(p["busbw_gbs"])))
    return rows


def parse_text(path, in_place):
    """Rows of an nccl-tests table: size count type redop root time algbw busbw #wrong (x2)."""
    cols = COLUMNS_IP if in_place else COLUMNS_OOP
    rows = []
    with open(path, errors="replace") as f:
        for line in f:
            line = re.sub(r"^\[\d+\] ", "", line.strip())  # collrun's rank prefix
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) <= cols[2] or not parts[0].isdigit():
                continue
            try:
                time_us, busbw = float(parts[cols[0]]), float(parts[cols[2]])
            except ValueError:
                continue  # "N/A" or a line that only looks like a row
            rows.append((int(parts[0]), time_us, busbw))
    return rows


def size_name(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


def xtics(sizes):
    """Tics at powers of two between the smallest and largest size, at most about ten."""
    lo, hi = min(sizes).bit_length() - 1, max(sizes).bit_length()
    step = max(1, (hi - lo + 9) // 10)
    return ", ".join(f'"{size_name(1 << e)}" {1 << e}' for e in range(lo, hi + 1, step))


def default_label(path):
    stem = os.path.splitext(os.path.basename(path))[0]
    parts = [p for p in stem.split("-") if not re.fullmatch(r"r?\d+", p)]
    return "-".join(parts) or stem


def collect(inputs, labels):
    files = []
    for item in inputs:
        if os.path.isdir(item):
            for name in sorted(os.listdir(item)):
                if name.endswith((".json", ".txt")) and name != "summary.txt":
                    files.append(os.path.join(item, name))
        elif os.path.isfile(item):
            files.append(item)
        else:
            sys.exit(f"plot_perf: {item}: no such file or directory")
    named = {}
    for spec in labels:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            sys.exit(f"plot_perf: --label {spec}: want NAME=FILE")
        if not os.path.isfile(path):
            sys.exit(f"plot_perf: --label {spec}: {path}: no such file")
        named[os.path.abspath(path)] = name
        if path not in files:
            files.append(path)
    return files, named


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True, help="the PNG to write")
    ap.add_argument("--title", default="")
    ap.add_argument("--in-place", action="store_true", help="plot the in-place columns")
    ap.add_argument("--label", action="append", default=[], metavar="NAME=FILE")
    ap.add_argument("inputs", nargs="*", help="result files or directories (--label files count too)")
    args = ap.parse_args()
    if shutil.which("gnuplot") is None:
        sys.exit("plot_perf: gnuplot is not installed (apt-get install gnuplot-nox)")

    if not args.inputs and not args.label:
        ap.error("no result files")
    files, named = collect(args.inputs, args.label)
    series = {}  # label -> size -> [(time, busbw)]
    for path in files:
        try:
            rows = parse_json(path, args.in_place) if path.endswith(".json") else parse_text(path, args.in_place)
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"plot_perf: {path}: not a benchmark result ({e})")
        label = named.get(os.path.abspath(path)) or default_label(path)
        if path.endswith(".json") and not named.get(os.path.abspath(path)):
            with open(path) as f:
                doc = json.load(f)
            label = f"{doc.get('backend', label)} {doc.get('benchmark', '')} np={doc.get('nranks', '?')}".strip()
        for size, time_us, busbw in rows:
            series.setdefault(label, {}).setdefault(size, []).append((time_us, busbw))
    series = {k: v for k, v in series.items() if v}
    if not series:
        sys.exit("plot_perf: no benchmark rows in " + ", ".join(args.inputs))

    base = os.path.splitext(args.output)[0]
    dat, gp = base + ".dat", base + ".gp"
    with open(dat, "w") as f:
        for label in series:  # one gnuplot data block per line, medians per size
            f.write(f"# {label}\n# size time_us busbw_gbs runs\n")
            for size in sorted(series[label]):
                runs = series[label][size]
                f.write(f"{size} {statistics.median(t for t, _ in runs):.4f} "
                        f"{statistics.median(b for _, b in runs):.6f} {len(runs)}\n")
            f.write("\n\n")
    title = args.title or os.path.basename(base)
    placement = "in-place" if args.in_place else "out-of-place"
    plots_bw, plots_t = [], []
    for i, label in enumerate(series):
        safe = label.replace('"', "'")
        # busbw 0 (sizes too small for the table's two decimals) has no place on a log axis
        plots_bw.append(f'"{dat}" index {i} using 1:($3 > 0 ? $3 : NaN) with linespoints lw 2 pt 7 title "{safe}"')
        plots_t.append(f'"{dat}" index {i} using 1:2 with linespoints lw 2 pt 7 title "{safe}"')
    all_sizes = [s for v in series.values() for s in v]
    script = f"""set terminal pngcairo size 1200,500 font ",10" noenhanced
set output "{args.output}"
set multiplot layout 1,2 title "{title.replace('"', "'")} ({placement}; medians of the runs at each size)"
set logscale x 2
set xtics ({xtics(all_sizes)})
set format y "%g"
set grid
set key left top
set xlabel "message size"
set ylabel "busbw (GB/s)"
set logscale y
plot {", ".join(plots_bw)}
set ylabel "time per call (us)"
set key left top
plot {", ".join(plots_t)}
unset multiplot
"""
    with open(gp, "w") as f:
        f.write(script)
    res = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"plot_perf: gnuplot failed: {res.stderr.strip()}")
    total = sum(len(v) for v in series.values())
    print(f"plot_perf: {args.output}: {len(series)} line(s), {total} point(s) ({', '.join(series)})")


if __name__ == "__main__":
    main()
