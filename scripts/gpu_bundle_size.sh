#!/bin/sh
# gpu_bundle_size.sh DIR MAX_MIB: fail when the files under DIR add up to more than MAX_MIB MiB.
# The GPU check's bundle travels with the working tree, 64 MiB in all (docs/gpu.md), so `make gpu-bundle`
# keeps it under 60.
set -eu
dir=$1
max=$2
[ -d "$dir" ] || { echo "gpu-bundle: $dir does not exist"; exit 1; }
files=$(find "$dir" -type f | wc -l)
bytes=$(find "$dir" -type f -exec cat {} + | wc -c)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.2f", b / 1048576 }')
if [ "$bytes" -gt $((max * 1048576)) ]; then
  echo "gpu-bundle: $dir holds $files files, $mib MiB: over the $max MiB limit"
  exit 1
fi
echo "gpu-bundle: $dir holds $files files, $mib MiB (limit $max MiB)"
