#!/usr/bin/env bash
# Make sure a Chromium is present for the Model Explorer browser test (tests/explain). On Debian/Ubuntu as root:
# installs Debian's chromium when missing (playwright drives it; no browser is downloaded). Elsewhere it only
# says what is missing: the test then skips locally (and fails in CI).
set -u
if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for the Model Explorer browser test"
  export DEBIAN_FRONTEND=noninteractive
  (apt-get install -y -qq chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null))
  exit $?
fi
echo "note: no chromium found; install Debian's chromium to run the Model Explorer browser test" >&2
exit 0
