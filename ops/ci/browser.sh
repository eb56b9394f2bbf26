#!/usr/bin/env bash
# Makes sure a headless Chromium is here for the dashboard's browser tests (tests/browser): Debian's
# chromium package, which Playwright drives as the system browser (a browser download is impossible on
# these machines). Installed once; later runs find it and do nothing.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  echo "browser: $(chromium --version 2>/dev/null | head -1)"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "browser: no chromium and cannot install it (needs root and apt-get): the browser tests will be skipped" >&2
  exit 0
fi
echo "browser: installing Debian's chromium"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
echo "browser: $(chromium --version 2>/dev/null | head -1)"
