#!/usr/bin/env bash
# Makes the screenshot of `blip demo --web` in Docs/ (Docs/web-demo.png by default): starts the demo, opens
# it in headless Chromium through chromedriver, lets the page and the Swift side exchange messages for a
# few seconds, and saves what the browser shows. Needs chromium and chromium-driver (.ci/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-Docs/web-demo.png}"
blip="${BLIP_BIN:-$(swift build --show-bin-path)/blip}"
work="$(mktemp -d)"
cleanup() {
    [ -n "${session:-}" ] && curl -s -X DELETE "$driver/session/$session" >/dev/null || true
    kill "${demo_pid:-}" "${driver_pid:-}" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

"$blip" demo --web --port 0 --seconds 120 >"$work/demo.log" 2>&1 &
demo_pid=$!
chromedriver --port=0 --allowed-ips=127.0.0.1 >"$work/driver.log" 2>&1 &
driver_pid=$!
for _ in $(seq 100); do
    grep -q "successfully on port" "$work/driver.log" 2>/dev/null && grep -q "open http" "$work/demo.log" 2>/dev/null && break
    sleep 0.1
done
page="$(grep -o 'http://127.0.0.1:[0-9]*/' "$work/demo.log" | head -n 1)"
driver="http://127.0.0.1:$(grep -o 'successfully on port [0-9]*' "$work/driver.log" | grep -o '[0-9]*$')"

json() { python3 -c "import json, sys; print(json.load(sys.stdin)$1)"; }
session="$(curl -s -X POST "$driver/session" -H 'Content-Type: application/json' -d "{
  \"capabilities\": {\"alwaysMatch\": {\"browserName\": \"chrome\", \"goog:chromeOptions\": {
    \"binary\": \"$(command -v chromium)\", \"args\": [\"--headless=new\", \"--no-sandbox\", \"--disable-gpu\",
    \"--disable-dev-shm-usage\", \"--hide-scrollbars\", \"--window-size=1280,820\", \"--user-data-dir=$work/profile\"]}}}
}" | json '["value"]["sessionId"]')"
curl -s -X POST "$driver/session/$session/url" -H 'Content-Type: application/json' -d "{\"url\": \"$page\"}" >/dev/null
# Long enough for the page's 1 000 round trips, a few greetings and the native side's ticks.
sleep "${BLIP_SCREENSHOT_WAIT:-7}"
curl -s "$driver/session/$session/screenshot" | json '["value"]' | base64 -d >"$out"
echo "wrote $out; the demo printed:"
sed -n '1,12p' "$work/demo.log"
