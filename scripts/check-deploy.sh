#!/usr/bin/env bash
# Checks the operator assets in deploy/: the Prometheus alert rules with
# `promtool check rules` (syntax, PromQL) and `promtool test rules` (each
# alert fires on libapf's series and stays quiet on a healthy level). The
# dashboard's and rules' metric names are checked against a real
# exposition by `cargo test --test end_to_end deploy_assets::`.
# Installs promtool (Debian package prometheus) when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null 2>&1; then
  echo "check-deploy: installing promtool (Debian package prometheus)" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get install -y -qq prometheus >/dev/null ||
    { $sudo apt-get update -qq && $sudo apt-get install -y -qq prometheus >/dev/null; }
fi
if ! command -v promtool >/dev/null 2>&1; then
  echo "check-deploy: promtool is not installed and could not be installed" >&2
  exit 1
fi

promtool check rules deploy/prometheus/apf-alerts.yaml
(cd deploy/prometheus && promtool test rules apf-alerts.test.yaml)
