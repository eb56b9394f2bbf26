#!/usr/bin/env bash
# Vendors the dashboard's chart library at build time: plotly.js's "basic" bundle (scatter, bar and
# the axes, error bars and annotations the dashboard draws; 1.2 MB, a quarter of the full plotly.min.js
# the plotly Python package ships, so a browser compiles it four times faster) from the npm package
# pinned by package-lock.json, into mlscope/api/dashboard/static/vendor/ (not committed). Without npm
# the dashboard serves the plotly package's full bundle instead: same charts, slower first load.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dest=$here/../../mlscope/api/dashboard/static/vendor
if ! command -v npm >/dev/null 2>&1; then
  echo "dashboard: no npm here; the dashboard serves the plotly package's full plotly.min.js" >&2
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$work/"
(cd "$work" && npm ci --ignore-scripts --no-audit --no-fund --no-update-notifier --loglevel=error >/dev/null)
package=$work/node_modules/plotly.js-basic-dist-min
mkdir -p "$dest"
cp "$package/plotly-basic.min.js" "$dest/plotly-basic.min.js"
cp "$package/LICENSE" "$dest/plotly-basic.LICENSE"
echo "dashboard: vendored plotly.js basic $(node -p "require('$package/package.json').version" 2>/dev/null || echo '?')"
