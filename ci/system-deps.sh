#!/usr/bin/env bash
# The Debian packages the test suite uses, installed where apt can (root on Debian). Each is optional:
# where it cannot be installed, the tests that need it skip and say why. Prints one line per package
# group it could not install; never fails the test command.
set -u

have_apt() { command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; }
APT_UPDATED=0
apt_install() {
    # apt_install PKG...: install the packages quietly; 0 on success.
    have_apt || return 1
    if [ "$APT_UPDATED" = 0 ]; then apt-get update -qq >/dev/null 2>&1 || return 1; APT_UPDATED=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1
}

# --- chromium: the report's browser tests ------------------------------------------------------
command -v chromium >/dev/null || apt_install chromium \
    || echo 'no chromium: the report browser tests will skip'

# --- slurm-wlm and munge: the SLURM executor's tests ------------------------------------------
# (section owned by the SLURM executor; see docs/distributed.md)
{ command -v slurmctld >/dev/null && command -v munged >/dev/null; } || apt_install slurm-wlm munge \
    || echo 'no slurm-wlm/munge: the SLURM executor tests will skip'

# --- nsight-systems: the nsys profile tests ---------------------------------------------------
# (section owned by the nsys profile; see docs/profiling.md)
# Debian ships Nsight Systems 2022.4 (nsys, its importer, `nsys stats`/`nsys export`) in `non-free`; its
# target package needs libcuda1, whose nvidia-support is in `contrib`. Where the sources lack either
# component, a sources file of our own adds it (same mirror, same suites) for this install only and is
# removed after it. Without recommends: no nvidia-smi, no NVML. Costs: docs/profiling.md.
NSYS_SOURCES=/etc/apt/sources.list.d/nvbench-non-free.sources
has_component() {
    # has_component NAME: a live one-line `deb` entry or deb822 Components line names it.
    grep -hsvE '^[[:space:]]*#' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list.d/*.sources | grep -qE "^(deb[[:space:]].*|Components:.*)[[:space:]]$1([[:space:]]|\$)"
}
add_components() {
    # Writes NSYS_SOURCES with the components Debian's archive lacks here; 1 when none is missing or not Debian.
    have_apt && [ -r /etc/os-release ] || return 1
    local id codename uri missing=""
    id=$(. /etc/os-release && echo "${ID:-}")
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ "$id" = debian ] && [ -n "$codename" ] || return 1
    for component in contrib non-free; do has_component "$component" || missing="$missing $component"; done
    [ -n "$missing" ] || return 1
    # the mirror the machine already uses for Debian's main archive (not -security), else Debian's own
    uri=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n1)
    [ -n "$uri" ] || uri=$(grep -hsE '^deb[[:space:]]' /etc/apt/sources.list | awk '{print $2}' \
        | grep -v security | head -n1)
    printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents:%s\nSigned-By: %s\n' \
        "${uri:-http://deb.debian.org/debian}" "$codename" "$codename" "$missing" \
        /usr/share/keyrings/debian-archive-keyring.gpg > "$NSYS_SOURCES" || return 1
    APT_UPDATED=0  # read the new components' package lists
}
install_nsys() {
    local added=0 ok=1
    add_components && added=1
    apt_install --no-install-recommends nsight-systems nsight-systems-target && ok=0
    [ "$added" = 0 ] || rm -f "$NSYS_SOURCES"
    return "$ok"
}
command -v nsys >/dev/null || install_nsys \
    || echo 'no nsight-systems (Debian contrib/non-free): the nsys profile tests will skip'

exit 0
