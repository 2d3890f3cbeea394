"""Reports: metrics from a Trace, readable summaries, Chrome traces."""
