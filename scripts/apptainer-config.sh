#!/usr/bin/env bash
# Make root apptainer work on hosts whose capability bounding set lacks some capabilities
# (this VM has no CAP_SYS_RESOURCE): root gets exactly the capabilities it can hold.
# Builds additionally need SINGULARITY_DROP_CAPS for the missing ones (see Makefile).
set -euo pipefail
conf=/etc/apptainer/apptainer.conf
[ -f "$conf" ] || { echo "apptainer-config: $conf missing; install apptainer first" >&2; exit 1; }
sed -i 's/^root default capabilities = .*/root default capabilities = file/' "$conf"
bounding=$(capsh --print | sed -n 's/^Bounding set =//p' | tr '[:lower:]' '[:upper:]')
# Quiet when they are already granted (a rerun); the whole output only when it fails.
out=$(apptainer capability add --user root "$bounding" 2>&1) || { echo "$out" >&2; exit 1; }
