#!/bin/sh
# soak_check: the soak's pass/fail rule (soak --check, tests/soak/soak.c)
# over made-up CSVs, so that the rule can be seen to fail: a flat load
# passes (after a fill in its first third, which the rule leaves out); RSS
# or committed memory that grows by 2% of its level a sample fails; a run
# too short for a trend fails.
#   soak_check.sh <soak binary> <work dir>
set -eu
soak=$1 dir=$2
mkdir -p "$dir"

# 60 samples: <name> <rss slope> <committed slope>, in KiB a sample after
# the fill; levels of 64 MiB, a fill from 0 over the first 20 samples, and
# +-1 MiB of noise from sample to sample.
csv() {
    awk -v rs="$2" -v cs="$3" -v n="${4:-60}" 'BEGIN {
        print "seconds,rss_kib,arena,mmapped,in_use,live_bytes,threads_started,forks"
        for (i = 0; i < n; i++) {
            fill = i < 20 ? i / 20 : 1
            noise = (i % 3 - 1) * 1024
            rss = 65536 * fill + noise + (i >= 20 ? (i - 20) * rs : 0)
            com = 65536 * fill + noise + (i >= 20 ? (i - 20) * cs : 0)
            printf "%d.0,%d,%d,%d,%d,%d,%d,%d\n", i + 1, rss, com * 1024 / 2, com * 1024 / 2,
                com * 512, 41943040, i, int(i / 3)
        }
    }' >"$dir/$1.csv"
}
csv flat 0 0
csv rss_up 1311 0    # 2% of 64 MiB a sample: +51 MiB over the last 40 samples
csv committed_up 0 1311
csv short 0 0 8

status=0
expect() { # <name> <0: passes | 1: fails>
    if "$soak" --check "$dir/$1.csv" >"$dir/$1.out" 2>&1; then got=0; else got=1; fi
    if [ "$got" -ne "$2" ]; then
        echo "soak --check $1.csv: exit $got, expected $2"
        cat "$dir/$1.out"
        status=1
    else
        echo "soak --check $1.csv: $([ "$got" -eq 0 ] && echo passes || echo fails), as it should"
    fi
}
expect flat 0
expect rss_up 1
expect committed_up 1
expect short 1
grep -q "RSS trends upward" "$dir/rss_up.out" || { echo "rss_up: not failed on RSS"; status=1; }
grep -q "committed trends upward" "$dir/committed_up.out" \
    || { echo "committed_up: not failed on committed memory"; status=1; }
exit $status
