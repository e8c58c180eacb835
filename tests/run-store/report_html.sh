#!/usr/bin/env bash
# run-store report --html: the page opens in a real headless chromium (Debian's), and the DOM it
# renders holds the per-level tables with the right numbers and the SVG plots (speedups, pass rate
# and mean reward per iteration, ppo-step, roofline); the page loads nothing from outside.
# Without chromium the test says so and exits 77, which ctest reports as skipped.
set -euo pipefail
RS="$CA_BIN/run-store"
FIX="$CA_SRC/tests/run-store/fixture"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "SKIP: chromium is not installed (apt-get install chromium; make -f Makefile.wrap deps installs it)" >&2
  exit 77
fi

# The level fixture, then a second reward-calc-like run and a ppo-step metrics record, so the page
# has two iterations and a training step to plot (the second run rewards two final candidates the
# same as the first, so the level numbers do not move).
"$RS" import --store "$T/r.db" -i "$FIX/levels.jsonl" 2> "$T/import.err" || fail "import of the fixture: $(cat "$T/import.err")"
cat > "$T/iter2.jsonl" <<'EOF'
{"task_id": "t1a", "candidate_id": "c1a2", "reward": {"value": 3, "scheme": "milestone"}}
{"task_id": "t3b", "candidate_id": "c3b1", "reward": {"value": 3, "scheme": "milestone"}}
{"schema": "cuda-agent/ppo-metrics/v1", "step_id": "s1", "step": 1, "mode": "rft", "reward_mean": 1.5, "losses": {"sft_loss": 0.7}}
EOF
"$RS" import --store "$T/r.db" -i "$T/iter2.jsonl" 2>/dev/null
"$RS" report "$T/r.db" --html "$T/report.html" --json > "$T/rows.jsonl" 2> "$T/err" || fail "report --html: $(cat "$T/err")"
grep -q "wrote $T/report.html" "$T/err" || fail "no note of the page written: $(cat "$T/err")"
[ -s "$T/report.html" ] || fail "no page"

# Self-contained: no script, no stylesheet or image from anywhere, no URL but the SVG namespace.
python3 - "$T/report.html" <<'PY' || fail "the page refers to something outside itself"
import re, sys
page = open(sys.argv[1]).read()
assert "<script" not in page, "script"
assert not re.search(r'\b(src|href)\s*=', page), re.search(r'\b(src|href)\s*=.{0,60}', page).group(0)
urls = set(re.findall(r'[a-z]+://[^"\s<>)]+', page))
assert urls <= {"http://www.w3.org/2000/svg"}, urls
PY

dump() {
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$T/profile" "$@" "file://$T/report.html" 2> "$T/chromium.err"
}
dump --dump-dom > "$T/dom.html" || fail "chromium could not open the page: $(tail -5 "$T/chromium.err")"
python3 - "$T/dom.html" "$T/rows.jsonl" <<'PY' || fail "rendered DOM"
import json, sys
from html.parser import HTMLParser

class Dom(HTMLParser):
    """Cells of the level tables by (table id, level, key), and the SVG shapes per plot id."""
    def __init__(self):
        super().__init__()
        self.table = self.level = self.key = None
        self.cells, self.shapes, self.svg = {}, {}, None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table": self.table = a.get("id")
        elif tag == "tr": self.level = a.get("data-level")
        elif tag == "td": self.key = a.get("data-key")
        elif tag == "svg": self.svg = a.get("id"); self.shapes[self.svg] = 0
        elif self.svg and tag in ("circle", "polyline", "line", "rect", "path"): self.shapes[self.svg] += 1
    def handle_endtag(self, tag):
        if tag == "table": self.table = None
        elif tag == "td": self.key = None
        elif tag == "svg": self.svg = None
    def handle_data(self, data):
        if self.table and self.level and self.key:
            self.cells[(self.table, self.level, self.key)] = self.cells.get((self.table, self.level, self.key), "") + data

dom = Dom()
dom.feed(open(sys.argv[1]).read())
# The numbers worked out by hand in report.sh, as the page prints them.
want = {
  ("levels-plain", "kernelbench#level1"): dict(tasks="4", passed="3", pass_rate="75.0%", faster_than_eager="75.0%",
      faster_than_compile="25.0%", geomean_vs_eager="1.489", geomean_vs_compile="0.952", fast_1_0="25.0%",
      fast_1_5="0.0%", fast_2_0="0.0%", reward_mean="1.500"),
  ("levels-plain", "kernelbench#level2"): dict(tasks="3", passed="2", pass_rate="66.7%", faster_than_compile="33.3%",
      geomean_vs_eager="4.000", geomean_vs_compile="1.600", fast_1_5="33.3%", reward_mean="1.000"),
  ("levels-plain", "torch#2"): dict(tasks="2", pass_rate="50.0%", geomean_vs_compile="2.000", fast_1_5="50.0%",
      fast_2_0="0.0%"),
  ("levels-plain", "all"): dict(tasks="9", passed="6", pass_rate="66.7%", faster_than_eager="55.6%",
      faster_than_compile="33.3%", fast_1_5="22.2%", reward_mean="1.250"),
  ("levels-matched", "kernelbench#level1"): dict(faster_than_eager_precision_matched="50.0%",
      geomean_vs_eager_precision_matched="1.339", geomean_vs_compile_precision_matched="0.832"),
  ("levels-matched", "kernelbench#level2"): dict(geomean_vs_eager_precision_matched="2.000",
      geomean_vs_compile_precision_matched="1.250", fast_1_5_precision_matched="0.0%"),
}
for (table, level), cells in want.items():
    for key, text in cells.items():
        got = dom.cells.get((table, level, key))
        assert got is not None and got.strip() == text, (table, level, key, got, text)
levels = sorted({l for (t, l, k) in dom.cells if t == "levels-plain"})
assert levels == ["all", "kernelbench#level1", "kernelbench#level2", "torch#2"], levels
# The page and --json agree on the rows.
rows = [json.loads(l) for l in open(sys.argv[2])]
assert [r["level"] for r in rows] == ["kernelbench#level1", "kernelbench#level2", "torch#2", "all"], rows
for plot in ("plot-speedup", "plot-pass-rate", "plot-reward", "plot-ppo", "plot-roofline"):
    assert dom.shapes.get(plot, 0) > 0, (plot, dom.shapes)
print(dom.shapes)
PY

# The plots are drawn, not only present: the screenshot is not one flat colour.
dump --screenshot="$T/page.png" --window-size=1200,2400 > /dev/null || fail "chromium screenshot: $(tail -5 "$T/chromium.err")"
python3 - "$T/page.png" <<'PY' || fail "the screenshot is blank"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n"
pos, idat, width, height = 8, b"", 0, 0
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    if kind == b"IHDR": width, height = struct.unpack(">II", data[pos + 8:pos + 16])
    if kind == b"IDAT": idat += data[pos + 8:pos + 8 + n]
    pos += 12 + n
raw = zlib.decompress(idat)
assert width > 0 and height > 0 and len(set(raw[: width * 4 * 400])) > 8, "flat"
PY
echo "run_store_report_html: ok"
