"""One refresh, step by step: planning, choosing the mode, the full and differential refreshes,
and what they share (the request and result, settings, steps, timings). `run.run_refresh`
runs them in order."""
