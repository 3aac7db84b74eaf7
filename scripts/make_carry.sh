#!/usr/bin/env bash
# Fills the ignored folder .carry/ with what the GPU machine needs and cannot download:
# .carry/sys, the libutf8proc Debian packages unpacked (for every build there), and
# .carry/corpus.txt.xz, the shared corpus (for training the default model only: carry it alone,
# the working tree plus carried paths must stay under 64 MiB).
set -e
cd "$(dirname "$0")/.."
mkdir -p .carry/sys
cp ../shared/corpus/corpus.txt.xz .carry/
tmp=$(mktemp -d); (cd "$tmp" && apt-get download libutf8proc-dev libutf8proc2 >/dev/null)
for f in "$tmp"/*.deb; do dpkg -x "$f" .carry/sys; done
rm -rf "$tmp"
