#!/bin/sh
# The report.html browser test needs a Chromium from the system packages
# (playwright drives it; it downloads no browser). Installed when missing,
# as root (CI) or through sudo -n; otherwise the test says how.
set -eu
for b in chromium chromium-browser; do
    if command -v "$b" >/dev/null 2>&1; then exit 0; fi
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
echo "make: chromium is missing; installing it: apt-get install -y chromium" >&2
if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; then
    # a fresh machine may have no package lists yet
    $SUDO apt-get update -qq >/dev/null 2>&1 || true
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
        echo "make: could not install chromium; the report.html browser test will fail until it is (apt-get install chromium)" >&2
fi
exit 0
