#!/usr/bin/env bash
# The system packages the test suite needs beyond Python and npm, installed idempotently: Debian's chromium (the
# chat page's browser tests) and Debian's PostgreSQL server binaries (the PostgreSQL store tests start their own
# throwaway server from them; no system cluster is created, so none is left running).
#
# `make test` and `.ci/run` call it. Run as root or with passwordless sudo, it installs what is missing with
# apt-get. Otherwise it prints exactly what to run and exits 0: the tests that need the packages are skipped
# (under CI, CI=true, it exits 1 instead, and those tests fail rather than skip).
set -euo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ]; then
  sudo_cmd=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo_cmd="sudo "
else
  sudo_cmd=none
fi

if [ "$sudo_cmd" = none ] || ! command -v apt-get >/dev/null 2>&1; then
  {
    if [ -n "${CI:-}" ]; then outcome="fail (CI is set)"; else outcome="are skipped"; fi
    echo "install-system-deps: missing ${missing[*]}; the tests that need them ${outcome}."
    if command -v apt-get >/dev/null 2>&1; then
      echo "To run them, install the packages as root (this script does it when run as root or with passwordless sudo):"
      echo
      if [[ " ${missing[*]} " == *" postgresql "* ]] && [ ! -f /etc/postgresql-common/createcluster.conf ]; then
        echo "  sudo mkdir -p /etc/postgresql-common"
        echo "  echo 'create_main_cluster = false' | sudo tee /etc/postgresql-common/createcluster.conf"
      fi
      echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}"
    else
      echo "Not a Debian system: install chromium (on PATH as 'chromium') and the PostgreSQL server binaries"
      echo "(initdb and pg_ctl, in /usr/lib/postgresql/<version>/bin or on PATH) with your package manager."
    fi
    echo
  } >&2
  if [ -n "${CI:-}" ]; then exit 1; fi
  exit 0
fi

if [[ " ${missing[*]} " == *" postgresql "* ]] && [ ! -f /etc/postgresql-common/createcluster.conf ]; then
  # Only the binaries are needed: with this, installing the package creates (and starts) no system cluster.
  ${sudo_cmd}mkdir -p /etc/postgresql-common
  echo "create_main_cluster = false" | ${sudo_cmd}tee /etc/postgresql-common/createcluster.conf >/dev/null
fi
echo "install-system-deps: installing ${missing[*]} with apt-get" >&2
${sudo_cmd}apt-get update -qq || true
${sudo_cmd}env DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o Dpkg::Options::=--force-confold "${missing[@]}" >/dev/null
