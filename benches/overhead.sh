#!/bin/sh
# Issue 16's overhead report in one run: installs what it compares against (sudo, bubblewrap)
# when missing, then runs the bench binary (release profile) and prints its Markdown report.
# Run as root from the repository root; extra environment knobs are in benches/overhead.rs.
set -eu
missing=""
command -v sudo >/dev/null 2>&1 || missing="$missing sudo"
command -v bwrap >/dev/null 2>&1 || missing="$missing bubblewrap"
if [ -n "$missing" ]; then
    echo "installing$missing (the bench compares against them)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >&2
fi
exec cargo bench --bench overhead "$@"
