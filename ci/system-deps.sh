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
# (section owned by the nsys profile; see docs/gpu-validation.md)

exit 0
