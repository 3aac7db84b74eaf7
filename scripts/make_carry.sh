#!/usr/bin/env bash
# Fills the ignored folder .carry/ with what the GPU machine needs and cannot download:
# the libutf8proc Debian packages (unpacked), the shared corpus and tokenizer files.
set -e
cd "$(dirname "$0")/.."
mkdir -p .carry/sys .carry/shared
tmp=$(mktemp -d); (cd "$tmp" && apt-get download libutf8proc-dev libutf8proc2 >/dev/null)
for f in "$tmp"/*.deb; do dpkg -x "$f" .carry/sys; done
rm -rf "$tmp"
