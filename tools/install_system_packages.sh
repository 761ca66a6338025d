#!/bin/sh
# Debian packages the tests need beyond Python's: Graphviz (VIZ=1 draws graphs with `dot`), Chromium (the VIZ
# test loads the page headless) and Fashion-MNIST (the dataset loader's test reads Debian's copy). Installs only what is missing, so a machine that has them pays nothing.
set -e
missing=""
command -v dot >/dev/null 2>&1 || missing="$missing graphviz"
command -v chromium >/dev/null 2>&1 || missing="$missing chromium fonts-dejavu-core"
[ -d /usr/share/datasets/fashion-mnist ] || missing="$missing dataset-fashion-mnist"
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
