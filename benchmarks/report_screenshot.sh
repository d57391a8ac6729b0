#!/usr/bin/env bash
# Render a real short simulation's report and screenshot it in headless Chromium, so a
# person can look at the page as a browser draws it (overlaps, legends, missing images).
# Not a timed benchmark and not run by pytest. Needs Debian's chromium:
#   apt-get install -y chromium
# Usage: benchmarks/report_screenshot.sh [OUT_DIR]   (default /tmp/sim-report)
set -euo pipefail
out=${1:-/tmp/sim-report}
here=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$out"
"$here/.venv/bin/slurm-ml" sim --start-hours 720 --hours 24 --gpus 256 --demand 2.5 \
    --policy fifo --policy budget --report "$out" >"$out.log" 2>&1
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --screenshot="$out/shot.png" --window-size=1400,6500 \
    "file://$out/index.html" >/dev/null 2>&1
echo "look at: $out/shot.png and $out/*.png (page: $out/index.html)"
