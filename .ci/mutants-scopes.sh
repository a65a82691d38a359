# The mutation scopes (docs/MUTANTS.md): sourced by .ci/run (the last commit's lines and one
# rotating sixteenth) and by .ci/mutants-all (every eighth of a scope, on a developer's
# machine). One definition, so the two never test different scopes.
#
# mutants_run SCOPE [CARGO MUTANTS ARGS...]: cargo mutants over SCOPE's files, with its
# exclusions and its tests, mutating a copy of the tree (never this checkout) built in its
# own target directory (target/mutants), so mutated binaries never reach target/debug.
#
# With REPOCH_MUTANTS_IN_PLACE=1 (.ci/run, after its test step) it mutates this checkout in
# place and builds in its own target directory, where the test step has just built and
# passed every test: each mutant then rebuilds only its crate and those above it, and the
# unmutated tree's tests are not run again (--baseline=skip). cargo mutants puts each file
# back after its mutant, and at an interrupt; a mutant's build is left in target/debug until
# the next build, which rebuilds the restored file (a checkout mid-run is not to be used).
#
# Scopes:
#   protocol   protocol verifiers and the consumer library, by their own packages' tests
#   issuance   the issuance and the fleet registry's steps, by the issuer's unit tests, the
#              checker (with its fleet world) and the storage simulation
#   events     the decoding of the kernel's process events, by repoch-sys's unit tests
MUTANTS_SCOPES=(protocol issuance events)

mutants_scope_label() {
  case $1 in
    protocol) echo "protocol verifiers, consumer library" ;;
    issuance) echo "issuance" ;;
    events) echo "process event decoding" ;;
    *) echo "unknown mutation scope: $1 (one of: ${MUTANTS_SCOPES[*]})" >&2; return 64 ;;
  esac
}

# The files a scope mutates, one per line.
mutants_scope_files() {
  case $1 in
    protocol)
      printf '%s\n' protocol/src/{epoch,journal,grant,manifest,sign,cbor,wire,types,checkpoint}.rs \
        protocol/src/epoch/{verify,chain}.rs \
        consumer/src/{lib,verify,persist,keys}.rs ;;
    # fleet.rs's Client adapter (two calls into repoch-registry) is reached only with a
    # real etcd: tests-native/tests/tooled/fleet.rs judges it, not this scope.
    issuance) printf '%s\n' issuer/src/issuance/{mod,before_intent,after_intent}.rs issuer/src/fleet.rs ;;
    # The subscription itself (the socket, its acknowledgement, its reads, the namespace
    # check) needs the kernel: tests-native's principals:: trials judge it, not this scope.
    events) printf '%s\n' sys/src/procevents.rs sys/src/ne.rs ;;
    *) mutants_scope_label "$1" >/dev/null ;;
  esac
}

mutants_run() {
  local scope=$1 args=() f
  shift
  mutants_scope_label "$scope" >/dev/null || return
  while read -r f; do
    # A file renamed or moved would leave the scope silently: cargo mutants takes a --file
    # that matches nothing.
    [ -f "$f" ] || { echo "mutation scope $scope: no file $f" >&2; return 64; }
    args+=(--file "$f")
  done < <(mutants_scope_files "$scope")
  case $scope in
    issuance) args+=(--exclude-re 'issuer/src/fleet\.rs:.*<impl Fleet for Client>') ;;
    events) args+=(--exclude-re 'Subscription::|Drop for Subscription|in_initial_namespaces') ;;
  esac
  args+=("$@")
  # A mutant's tests end within the timeout or it counts as caught (a hang). The issuance's
  # tests take 75 to 100 s unmutated on 2 cores (the checker most of it): 300 s leaves room
  # for a loaded machine; the protocol's take about a second.
  local timeout=180
  case $scope in
    issuance) timeout=300 args+=(-- --lib --test checker --test sim) ;;
    events) args+=(-- --lib) ;;
  esac
  # The checker's random walks at a fifth of their default: its exhaustive searches are
  # what catch a mutant; the walks are for paths beyond the bound (docs/MUTANTS.md).
  local target=$PWD/target/mutants where=()
  if [ "${REPOCH_MUTANTS_IN_PLACE:-}" = 1 ]; then
    target=${CARGO_TARGET_DIR:-$PWD/target} where=(--in-place --baseline=skip)
  fi
  # A mutant's failing property test must not write its seed into the tree's
  # proptest-regressions files (in place, they are the checkout's own).
  REPOCH_SIM_SEEDS=2000 CARGO_TARGET_DIR="$target" PROPTEST_DISABLE_FAILURE_PERSISTENCE=1 \
    cargo mutants --no-shuffle --timeout "$timeout" "${where[@]}" "${args[@]}"
}

# CI's shards: one sixteenth of every scope a run, a different one each day (about 7 minutes
# of a run's mutants on 2 cores; an eighth took 14, too much of CI's 45-minute budget). The
# mutants are the same whatever the count: .ci/mutants-all's eighths cover them all.
MUTANTS_CI_SHARDS=16

# The shard of the day (0-15): REPOCH_MUTANTS_SHARD when set, else the day of the year
# modulo MUTANTS_CI_SHARDS.
mutants_shard_of_the_day() {
  local s=${REPOCH_MUTANTS_SHARD:-$((10#$(date +%j) % MUTANTS_CI_SHARDS))}
  if [[ $s =~ ^[0-9]+$ ]] && [ "$((10#$s))" -lt "$MUTANTS_CI_SHARDS" ]; then
    echo "$((10#$s))"
  else
    echo "REPOCH_MUTANTS_SHARD=$s: a shard is 0 to $((MUTANTS_CI_SHARDS - 1))" >&2
    return 64
  fi
}

# mutants_verdict OUTDIR RC: 0 when every mutant of the run in OUTDIR was caught (a timeout,
# a mutant that made the tests hang, is caught), 2 when one was missed, RC otherwise.
# cargo mutants exits 3 when any mutant timed out even if another was missed: the verdict
# reads its missed.txt, never the exit code alone.
mutants_verdict() {
  local out=$1 rc=$2
  if [ -s "$out/mutants.out/missed.txt" ]; then
    sed 's/^/MISSED /' "$out/mutants.out/missed.txt"
    return 2
  fi
  case $rc in 0 | 3) return 0 ;; *) return "$rc" ;; esac
}
