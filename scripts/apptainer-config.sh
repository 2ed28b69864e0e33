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
# Unprivileged apptainer (no setuid starter in Debian's package) mounts SIF images with
# squashfuse once that is installed (Enroot's dependencies bring it), through /dev/fuse.
# Debian's fuse3 udev rule makes /dev/fuse 0666; this VM has no udev and leaves it 0600, so
# an ordinary user's `apptainer exec`/`%test` fails with "failed to open /dev/fuse".
if [ -c /dev/fuse ] && [ "$(stat -c %a /dev/fuse)" != 666 ]; then chmod 0666 /dev/fuse; fi
