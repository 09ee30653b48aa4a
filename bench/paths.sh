# bench/paths.sh - sourced by the bench/*.sh scripts, which all find their
# folders the same way: here (bench/), root (the repository), and
# bench_build DIR, a build folder named on the command line: DIR itself
# when absolute, else relative to the repository.
# shellcheck shell=bash
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
bench_build() {
    case $1 in
    /*) echo "$1" ;;
    *) echo "$root/$1" ;;
    esac
}
