#!/usr/bin/env bash
# The main job: set up, build, and run peregrine on its built-in lab.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# With no arguments, the built-in showcase (`peregrine` alone prints the usage).
exec ./target/release/peregrine "${@:-showcase}"
