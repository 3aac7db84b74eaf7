#!/usr/bin/env bash
# Prepares the GPU machine (Ubuntu, no network) for `make`: it lacks libutf8proc, so the
# Debian package's files are carried in .carry/sys (made here by scripts/make_carry.sh) and
# copied into place. Run from the repository root on the device: `bash scripts/device_prep.sh`.
set -e
if [ ! -e /usr/include/utf8proc.h ]; then
  cp .carry/sys/usr/include/utf8proc.h /usr/include/
  cp -P .carry/sys/usr/lib/x86_64-linux-gnu/libutf8proc* /usr/lib/x86_64-linux-gnu/
  ldconfig
fi
