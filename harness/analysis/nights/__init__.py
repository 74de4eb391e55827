"""Living with nights: the history of a metric's nights and its steps (`history`, with its cache and the work's
history), a regression that alarms once (`alarms`), and what is kept of baselines, acknowledgements and alarms
on disk (`baselines`)."""
