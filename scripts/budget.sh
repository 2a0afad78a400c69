# Sourced by the recipes: the optional time budget of one invocation.
#
#   budget_start MINUTES   start the clock (empty MINUTES: no budget)
#   budget_left_s          seconds left (a large number without a budget; 0 once spent)
#   budget_left_min        whole minutes left, at least 1 while any time is left
#   budget_spent           true once the budget is used up
#   budget_stop            say that the budget is spent and how to continue, then exit 0
#
# A recipe stops at the deadline without losing work: every `lra` step it runs resumes, so
# running the same command again continues where it stopped.

budget_start() {
  BUDGET_MINUTES=${1:-}
  if [[ -n "$BUDGET_MINUTES" && ! "$BUDGET_MINUTES" =~ ^[0-9]+$ ]]; then
    echo "MINUTES must be a whole number of minutes, got '$BUDGET_MINUTES'" >&2
    exit 2
  fi
  if [[ -n "$BUDGET_MINUTES" ]]; then
    BUDGET_DEADLINE=$(( $(date +%s) + BUDGET_MINUTES * 60 ))
  else
    BUDGET_DEADLINE=
  fi
}

budget_left_s() {
  if [[ -z "$BUDGET_DEADLINE" ]]; then echo 999999999; return; fi
  local left=$(( BUDGET_DEADLINE - $(date +%s) ))
  (( left > 0 )) && echo "$left" || echo 0
}

budget_left_min() {
  local left
  left=$(budget_left_s)
  (( left > 0 )) && echo $(( (left + 59) / 60 )) || echo 0
}

budget_spent() {
  [[ -n "$BUDGET_DEADLINE" ]] && (( $(budget_left_s) == 0 ))
}

budget_stop() {
  echo "time budget of $BUDGET_MINUTES min spent; run the same command again to continue" >&2
  exit 0
}
