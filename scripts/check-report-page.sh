#!/usr/bin/env bash
# Opens the page `apf simulate --out DIR` writes (index.html: the report and
# every chart) in headless Chromium and checks that it renders: the report
# is on the page and every chart image loads (none broken). A control run
# with one chart removed must be reported broken, so the check can fail.
# Installs Debian's chromium when it is missing; if that fails, says so and
# fails rather than passing without a browser.
#   scripts/check-report-page.sh            (builds the apf tool if needed)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
  echo "check-report-page: installing chromium (Debian package, one-time)" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get install -y -qq chromium >/dev/null ||
    { $sudo apt-get update -qq && $sudo apt-get install -y -qq chromium >/dev/null; } || true
fi
if ! command -v chromium >/dev/null 2>&1; then
  echo "check-report-page: FAILED: chromium is not installed and could not be installed;" >&2
  echo "the report page was NOT checked in a browser" >&2
  exit 1
fi

cargo build -q -p apf-cli --bin apf
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# 12 simulated seconds of the built-in scenario: the runaway's phase at
# 10 s, rejections and borrowing all show.
target/debug/apf simulate --duration 12s --out "$work/report" >/dev/null

# The page as written, plus a script that records, once everything has
# loaded, how many images there are and which did not load.
check_page() { # dir -> DOM after load on stdout
  local dir="$1"
  # (After </html> the parser still puts the script in the body.)
  cat "$dir/index.html" - > "$dir/check.html" <<'SCRIPT'
<script>
window.addEventListener("load", () => {
  const imgs = [...document.images];
  const broken = imgs
    .filter((i) => !(i.complete && i.naturalWidth > 0))
    .map((i) => i.getAttribute("src"));
  document.body.dataset.images = imgs.length;
  document.body.dataset.broken = broken.join(" ") || "none";
});
</script>
SCRIPT
  timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic \
    --disable-background-networking --disable-component-update --disable-sync \
    --no-first-run --user-data-dir="$work/profile-$(basename "$dir")" \
    --allow-file-access-from-files --virtual-time-budget=10000 \
    --dump-dom "file://$dir/check.html" 2>/dev/null
}

dom="$(check_page "$work/report")"
images="$(printf '%s' "$dom" | grep -o 'data-images="[0-9]*"' || true)"
broken="$(printf '%s' "$dom" | grep -o 'data-broken="[^"]*"' || true)"
expected="$(grep -c '<img ' "$work/report/index.html")"
if [ "$images" != "data-images=\"$expected\"" ] || [ "$broken" != 'data-broken="none"' ]; then
  echo "check-report-page: FAILED: index.html did not render whole ($images of $expected, $broken)" >&2
  exit 1
fi
if ! printf '%s' "$dom" | grep -q 'verdict: '; then
  echo "check-report-page: FAILED: the report text is not on the page" >&2
  exit 1
fi

# Control: with a chart missing, the same check must see it broken.
cp -r "$work/report" "$work/control"
rm "$work/control/rejections.svg"
if ! check_page "$work/control" | grep -q 'data-broken="rejections.svg"'; then
  echo "check-report-page: FAILED: a missing chart was not detected (the check is blind)" >&2
  exit 1
fi
echo "check-report-page: index.html renders in Chromium with all $expected charts"
