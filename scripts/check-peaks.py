#!/usr/bin/env python3
"""scripts/check-peaks.py - predicted against measured pool peak, row by
row, in bench CSVs (issue 48 item 2: every GPU bench row carries both, and
they must be equal, as on the CPU rows).

    python3 scripts/check-peaks.py FILE.csv...

A file's predicted column is predicted_peak_bytes; its measured column is
measured_peak_bytes, or peak_bytes where that is absent (mg-bench depth's
CSVs). A row is memgrad's when its `case` starts with "memgrad" or, in a
file without `case` (mg-bench's own CSVs), always. Every memgrad row must
have both numbers, equal; a row of another case (torch-plain, ...) must
leave them empty or equal. A file without the columns (torch-cuda.csv made
before 2026-11-29) is said to be skipped, not failed: its figures were
never recorded, and cannot be made up now.

Prints one line per file; exit status 1 on any difference or missing
number, 2 on a file that cannot be read.
"""
import csv
import sys


def check(path):
    """(status, line): status 0 checked, 1 bad, 'skip' no columns."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
        cols = rows[0].keys() if rows else []
    if not rows:
        with open(path, newline="") as f:
            cols = next(csv.reader(f), [])
    pred = "predicted_peak_bytes" if "predicted_peak_bytes" in cols else None
    meas = next((c for c in ("measured_peak_bytes", "peak_bytes")
                 if c in cols), None)
    if not pred or not meas:
        return "skip", (f"{path}: skipped, no predicted_peak_bytes and "
                        "measured_peak_bytes (or peak_bytes) columns: made "
                        "before GPU rows carried them")
    bad, n = [], 0
    for i, r in enumerate(rows, start=2):  # line 1 is the header
        ours = r["case"].startswith("memgrad") if "case" in r else True
        p, m = (r.get(pred) or "").strip(), (r.get(meas) or "").strip()
        if ours and (not p or not m):
            bad.append(f"{path}:{i}: a memgrad row without both peaks "
                       f"({pred} '{p}', {meas} '{m}')")
            continue
        if p != m:
            bad.append(f"{path}:{i}: {pred} {p} but {meas} {m}")
            continue
        if ours:
            n += 1
    if bad:
        return 1, "\n".join(bad)
    if n == 0:
        return 1, f"{path}: no memgrad row with a predicted and measured peak"
    return 0, f"{path}: {n} memgrad rows, {pred} == {meas} on every one"


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: check-peaks.py FILE.csv...")
    status = 0
    for path in sys.argv[1:]:
        try:
            st, line = check(path)
        except (OSError, csv.Error, UnicodeDecodeError) as e:
            print(f"{path}: cannot read: {e}", file=sys.stderr)
            status = max(status, 2)
            continue
        print(line, file=sys.stderr if st == 1 else sys.stdout)
        if st == 1:
            status = max(status, 1)
    sys.exit(status)


if __name__ == "__main__":
    main()
