# Where a run's time goes (issue 64): `.ci/run` and `scripts/test` record each phase they run,
# nextest writes each test's duration (JUnit, .config/nextest.toml), and scripts/ci-report prints
# the phase table, the longest tests and each family's time against docs/ci-budget.md.
#
# Sourced. TIMES_DIR (default target/times) holds phases.tsv, one line a phase:
#   <depth>\t<name>\t<start epoch s>\t<end epoch s>\t<ok|failed>
# and junit-<phase>.xml, nextest's JUnit report of each test phase.
TIMES_DIR=${TIMES_DIR:-$PWD/target/times}
export TIMES_DIR
mkdir -p "$TIMES_DIR"

# times_begin <depth> <name>: ends the open phase of that depth (ok) and starts this one.
times_begin() {
  times_end "$1" ok
  printf -v "_times_name_$1" '%s' "$2"
  printf -v "_times_t0_$1" '%s' "$(date +%s.%N)"
}

# times_end <depth> <ok|failed>: records the open phase of that depth, if any.
times_end() {
  local name="_times_name_$1" t0="_times_t0_$1"
  [[ -n "${!name:-}" ]] || return 0
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "${!name}" "${!t0}" "$(date +%s.%N)" "$2" \
    >>"$TIMES_DIR/phases.tsv"
  printf -v "$name" '%s' ""
}

# times_junit <phase>: keeps nextest's JUnit report of the run that just ended (each nextest run
# writes the same file) as junit-<phase>.xml. nextest keeps it in its store, target/nextest of
# the workspace, whatever CARGO_TARGET_DIR says.
times_junit() {
  local report=target/nextest/default/junit.xml
  [[ -f $report ]] && mv "$report" "$TIMES_DIR/junit-$1.xml"
  return 0
}
