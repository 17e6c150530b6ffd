#!/bin/sh
# joined_check.sh VIEW PNG_CHECK OUT: the 10,000-link showcase drawn with its links joined (250
# capsules of 40 links, the default) and with every link (--every-link), after 3 s: the headless
# runs say which, and the two frames look the same (at most 0.15 % of the pixels differ: colour
# bands move by up to half a capsule; the chain itself covers about 0.4 %).
set -eu
view=$1 check=$2 out=$3
scene=$(dirname "$0")/../../scenes/showcase_chain10000.xml
rm -rf "$out"
"$view" "$scene" --headless --frames 2 --warmup 3 --out "$out/joined" | tee "$out.joined.log"
"$view" "$scene" --headless --frames 2 --warmup 3 --out "$out/every" --every-link | tee "$out.every.log"
grep -q "drawn: 250 capsules of 40 links" "$out.joined.log" || { echo "FAILED: not joined"; exit 1; }
grep -q "drawn: every link" "$out.every.log" || { echo "FAILED: --every-link did not draw every link"; exit 1; }
"$check" "$out/joined/frame_00001.png" "$out/every/frame_00001.png" --size 640x480 --max-changed 0.0015
