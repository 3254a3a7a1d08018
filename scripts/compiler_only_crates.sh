#!/usr/bin/env bash
# Prints the `[profile.dev.package]` lines of Cargo.toml that keep the crates only the
# compiler runs (proc macros, build scripts' helpers, and what only they depend on) at
# opt-level 0: the packages `cargo tree -e all` lists and `cargo tree -e
# normal,dev,no-proc-macro` does not, less those of which another version runs (a profile
# override names a package, not a version). Compare its output with Cargo.toml's list after
# a dependency changes (docs/ci.md, "Proc macros at opt-level 0").
set -euo pipefail
cd "$(dirname "$0")/.."

# The names of the packages in `cargo tree`'s graph with the given edges.
packages() {
  cargo tree --workspace --prefix none --format "{p}" "$@" | sed -n 's/^\([A-Za-z0-9_-]*\) v[0-9].*/\1/p' | sort -u
}
all=$(packages -e all)
running=$(packages -e normal,dev,no-proc-macro)
comm -23 <(echo "$all") <(echo "$running") | sed 's/$/.opt-level = 0/'
